/*
 * agent.c - cnlab-agent's daemon logic (see agent.h for the threads and
 * the layout of the work directory).
 *
 * A local workload (struct wk) exists from the moment its assignment is
 * started until its end has been reported (or it was moved away).  Its
 * (id, epoch) pair is what every message to cnlabd carries; a 409 from
 * cnlabd means the epoch is stale, and the agent then kills the workload
 * without reporting anything more about it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/gpu.h"
#include "agent/launch.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "common/base64.h"
#include "net/client.h"
#include "net/http_server.h"
#include "net/metrics.h"
#include "sched/catalog.h"
#include "shim/region.h"
#include "wire/node.h"

#define LOG_CHUNK_MAX (64 * 1024)
#define FILE_MAX      (512 * 1024) /* artifacts and checkpoint files */
#define IDLE_CHECK_MS 5000

struct wk {
	char id[64];
	int64_t epoch;
	bool server;
	struct cnl_workload *w;
	char dir[512];    /* working directory */
	char art[560];    /* artifacts dir (jobs) */
	char ckpt[560];   /* checkpoint dir (jobs) */
	char region[560]; /* region file */
	int gpu;          /* first GPU index, -1: none */
	int board_slot;   /* row on the GPU's board, -1: none */
	char mig_uuid[CNL_GPU_UUID_MAX];
	bool stopping;
	bool term_sent;
	int64_t signal_ms, kill_ms;
	int port;
	int64_t idle_timeout_ms, last_active_ms;
	uint64_t last_busy_ns;
	bool idle_stopped;
	char out[LOG_CHUNK_MAX];
	size_t out_n;
	char err_buf[LOG_CHUNK_MAX];
	size_t err_n;
	bool gone;   /* moved away: kill, report nothing */
	bool fenced; /* killed by this agent's lease: its end says so */
	/* Output goes to files under state/, not pipes, so that a workload
	 * outlives an agent restart; the agent reads them from an offset. */
	int out_rd, err_rd;
	int64_t out_off, err_off;
	/* Ended, but cnlabd has not taken the report yet (unreachable):
	 * kept and reported again until it answers. */
	char token[33]; /* notebook servers: their access token */
	bool ended;
	char end_state[16];
	int end_code;
	char end_msg[128];
	int64_t end_retry_ms;
};

struct cnl_agent {
	struct cnl_agent_config cfg;
	struct cnl_catalog cat;
	struct cnl_gpus *gpus;
	struct cnl_launcher *launcher;
	struct cnl_client *main_cl, *hb_cl, *sup_cl;
	pthread_mutex_t mu;
	struct wk **wk;
	size_t n_wk, cap_wk;
	char node_id[64];
	int64_t node_epoch;
	int64_t lease_ms, heartbeat_ms;
	_Atomic int64_t last_hb_ok_ms;
	atomic_bool stop;
	pthread_t hb_thread, sup_thread;
	struct cnl_http_server *metrics;
	uint64_t version;
	uint64_t started_total, ended_total, fenced_total;
	char self_exe[512]; /* this binary: the workload's watchdog */
	char lease[600];    /* touched after each good heartbeat */
};

static int64_t now_ms(void)
{
	return cnl_time_now_ms();
}

static struct wk *wk_find(struct cnl_agent *a, const char *id)
{
	for (size_t i = 0; i < a->n_wk; i++)
		if (strcmp(a->wk[i]->id, id) == 0)
			return a->wk[i];
	return NULL;
}

/* Destroy MIG instance @uuid unless a workload of the table still uses
 * it (a host instance serves several block slices). */
static void mig_release(struct cnl_agent *a, const char *uuid)
{
	if (!uuid[0])
		return;
	for (size_t i = 0; i < a->n_wk; i++)
		if (strcmp(a->wk[i]->mig_uuid, uuid) == 0)
			return;
	cnl_gpus_mig_destroy(a->gpus, uuid);
}

static void wk_remove(struct cnl_agent *a, struct wk *w)
{
	for (size_t i = 0; i < a->n_wk; i++)
		if (a->wk[i] == w) {
			a->wk[i] = a->wk[--a->n_wk];
			break;
		}
	mig_release(a, w->mig_uuid);
	cnl_workload_free(w->w);
	if (w->out_rd >= 0)
		close(w->out_rd);
	if (w->err_rd >= 0)
		close(w->err_rd);
	free(w);
}

/* state/<id>.stdout or .stderr */
static void out_path(const struct cnl_agent *a, const char *id,
                     const char *stream, char *buf, size_t len)
{
	snprintf(buf, len, "%s/state/%s.%s", a->cfg.work_dir, id, stream);
}

/* mkdir -p for the few levels we create. */
static int mkdirs(const char *path)
{
	char buf[600];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i < n; i++)
		if (buf[i] == '/') {
			buf[i] = '\0';
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				return -errno;
			buf[i] = '/';
		}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* ---- files to and from cnlabd ----------------------------------------- */

/* Upload each regular file of @dir (at most FILE_MAX bytes) to @route. */
static void upload_dir(struct cnl_agent *a, struct cnl_client *cl,
                       const struct wk *w, const char *dir, const char *what)
{
	char path[1200], route[256], err[256];
	struct dirent *e;
	DIR *d = opendir(dir);

	if (!d)
		return;
	snprintf(route, sizeof(route), "/v1/nodes/%s/%s", a->node_id, what);
	while ((e = readdir(d))) {
		struct stat st;
		uint8_t *buf;
		FILE *f;
		size_t got;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (st.st_size > FILE_MAX) {
			cnl_log(CNL_LOG_WARN, "file too large to upload",
			        "id=%s file=%s size=%lld", w->id, e->d_name,
			        (long long)st.st_size);
			continue;
		}
		if (!(f = fopen(path, "rb")))
			continue;
		buf = cnl_xmalloc((size_t)st.st_size + 1);
		got = fread(buf, 1, (size_t)st.st_size, f);
		fclose(f);
		char *data = cnl_b64_encode_new(buf, got, CNL_B64_PAD);
		json_t *body = json_pack("{s:s,s:I,s:s,s:s}", "id", w->id,
		                         "epoch", (json_int_t)w->epoch, "name",
		                         e->d_name, "data_base64", data);
		long st2 = cnl_client_call(cl, "POST", route, body, 30, NULL,
		                           err, sizeof(err));
		if (st2 != 201)
			cnl_log(CNL_LOG_WARN, "upload refused",
			        "id=%s file=%s %s", w->id, e->d_name, err);
		json_decref(body);
		free(data);
		free(buf);
	}
	closedir(d);
}

/*
 * Write the job's files of @what ("checkpoints": a requeued job's latest
 * checkpoint; "inputs": the files it was submitted with) into @dest.
 */
static void fetch_files(struct cnl_agent *a, struct cnl_client *cl,
                        const struct wk *w, const char *what, const char *dest)
{
	char route[256], err[256], path[1200];
	json_t *reply = NULL, *items;

	snprintf(route, sizeof(route), "/v1/nodes/%s/%s?job=%s&epoch=%" PRId64,
	         a->node_id, what, w->id, w->epoch);
	if (cnl_client_call(cl, "GET", route, NULL, 30, &reply, err,
	                    sizeof(err)) != 200) {
		json_decref(reply);
		return;
	}
	items = json_object_get(reply, "items");
	for (size_t i = 0; i < json_array_size(items); i++) {
		json_t *it = json_array_get(items, i);
		const char *name =
		    json_string_value(json_object_get(it, "name"));
		const char *data =
		    json_string_value(json_object_get(it, "data_base64"));
		size_t len;
		uint8_t *buf;
		FILE *f;

		if (!name || !data || strchr(name, '/') || name[0] == '.')
			continue;
		if (cnl_b64_decode_new(data, CNL_B64_PAD, FILE_MAX, &buf,
		                       &len) == 0) {
			snprintf(path, sizeof(path), "%s/%s", dest, name);
			if ((f = fopen(path, "wb"))) {
				fwrite(buf, 1, len, f);
				fclose(f);
			}
			free(buf);
		}
	}
	if (json_array_size(items))
		cnl_log(CNL_LOG_INFO, "files restored",
		        "id=%s what=%s files=%zu", w->id, what,
		        json_array_size(items));
	json_decref(reply);
}

/* ---- starting ------------------------------------------------------------ */

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static void save_state(struct cnl_agent *a, const struct wk *w)
{
	char path[700], tmp[720];
	json_t *o = json_pack(
	    "{s:s,s:I,s:b,s:s,s:s,s:s,s:s,s:i,s:I,s:i,s:I,s:I}", "id", w->id,
	    "epoch", (json_int_t)w->epoch, "server", w->server, "dir", w->dir,
	    "art", w->art, "ckpt", w->ckpt, "region", w->region, "port",
	    w->port, "idle_timeout_ms", (json_int_t)w->idle_timeout_ms, "gpu",
	    w->gpu, "out_off", (json_int_t)w->out_off, "err_off",
	    (json_int_t)w->err_off);

	snprintf(path, sizeof(path), "%s/state/%s.json", a->cfg.work_dir,
	         w->id);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(o, tmp, JSON_COMPACT) == 0)
		rename(tmp, path);
	json_decref(o);
}

static void drop_state(struct cnl_agent *a, const char *id)
{
	char path[700];

	snprintf(path, sizeof(path), "%s/state/%s.json", a->cfg.work_dir, id);
	unlink(path);
}

/* Report @state for @w; returns the HTTP status (409: fenced). */
static long report(struct cnl_agent *a, struct cnl_client *cl,
                   const struct wk *w, const char *state, int code,
                   const char *url, const char *msg)
{
	char route[256], err[256];
	json_t *body =
	    json_pack("{s:s,s:I,s:s,s:i}", "id", w->id, "epoch",
	              (json_int_t)w->epoch, "state", state, "exit_code", code);
	long st;

	if (url)
		json_object_set_new(body, "url", json_string(url));
	if (msg)
		json_object_set_new(body, "message", json_string(msg));
	snprintf(route, sizeof(route), "/v1/nodes/%s/reports", a->node_id);
	st = cnl_client_call(cl, "POST", route, body, 30, NULL, err,
	                     sizeof(err));
	if (st != 200)
		cnl_log(CNL_LOG_WARN, "report not accepted",
		        "id=%s state=%s %s", w->id, state, err);
	json_decref(body);
	return st;
}

/* The lowest board row no running slice of GPU @gpu holds. */
static unsigned board_slot(struct cnl_agent *a, int gpu)
{
	unsigned slot = 0;
	bool taken = true;

	pthread_mutex_lock(&a->mu);
	while (taken && slot < CNL_BOARD_SLICES) {
		taken = false;
		for (size_t i = 0; i < a->n_wk; i++)
			if (a->wk[i]->gpu == gpu &&
			    a->wk[i]->board_slot == (int)slot)
				taken = true;
		if (taken)
			slot++;
	}
	pthread_mutex_unlock(&a->mu);
	return slot;
}

/* Start the assignment @as; called without the lock. */
static void start(struct cnl_agent *a, json_t *as)
{
	const char *id = json_string_value(json_object_get(as, "id"));
	const char *kind = json_string_value(json_object_get(as, "kind"));
	const char *project =
	    json_string_value(json_object_get(as, "project_id"));
	json_t *gpu = json_object_get(as, "gpu");
	int64_t blocks = json_integer_value(json_object_get(gpu, "blocks"));
	int64_t vram = json_integer_value(json_object_get(gpu, "vram_mib"));
	int64_t gmask = json_integer_value(json_object_get(gpu, "gpu_mask"));
	const char *mig =
	    json_string_value(json_object_get(gpu, "mig_profile"));
	const struct cnl_gpu_dev *devs;
	int ndev = cnl_gpus_list(a->gpus, &devs);
	char cvd[256] = "", err[1400], env_buf[20][700];
	_cleanup_free_ char *gang_nodes = NULL;
	json_t *gang = json_object_get(as, "gang");
	const char *envp[64], *argv[8];
	char lease_ms[32];
	struct cnl_launch_spec spec = {0};
	struct wk *w = cnl_xcalloc(1, sizeof(*w));
	int ne = 0, r;

	snprintf(w->id, sizeof(w->id), "%s", id);
	w->epoch = json_integer_value(json_object_get(as, "epoch"));
	w->server = kind && strcmp(kind, "server") == 0;
	w->gpu = -1;
	w->board_slot = -1;
	w->out_rd = w->err_rd = -1;
	/* GPUs: indexes of the mask, or the MIG instance's UUID. */
	for (int i = 0; i < ndev && json_object_get(gpu, "gpu_mask"); i++)
		if (gmask >> i & 1) {
			size_t l = strlen(cvd);

			snprintf(cvd + l, sizeof(cvd) - l, "%s%d", l ? "," : "",
			         devs[i].index);
			if (w->gpu < 0)
				w->gpu = i;
		}
	if (w->gpu >= 0 && blocks > 0 && ndev == 0) {
		r = -CNL_ENODE;
		snprintf(err, sizeof(err), "this node has no GPU");
		goto fail;
	}
	if (json_object_get(gpu, "gpu_mask") && w->gpu < 0 && gmask) {
		r = -CNL_ENODE;
		snprintf(err, sizeof(err),
		         "assignment names GPU mask 0x%llx; this node has %d "
		         "GPUs",
		         (long long)gmask, ndev);
		goto fail;
	}
	if (mig && w->gpu >= 0) {
		int start_slot =
		    (int)json_integer_value(json_object_get(gpu, "mig_start"));

		r = cnl_gpus_mig_create(a->gpus, w->gpu, mig, start_slot,
		                        w->mig_uuid);
		if (r == -CNL_EDUP && w->mig_uuid[0]) {
			/* A host instance shared by block slices: use it (the
			 * last of its slices to end destroys it). */
			snprintf(cvd, sizeof(cvd), "%s", w->mig_uuid);
			r = 0;
		} else if (r == 0) {
			snprintf(cvd, sizeof(cvd), "%s", w->mig_uuid);
		} else {
			snprintf(err, sizeof(err),
			         "cannot create MIG instance %s on GPU %d: %s",
			         mig, w->gpu, cnl_strerror(r));
			goto fail;
		}
	}
	/* Directories. */
	if (w->server) {
		snprintf(w->dir, sizeof(w->dir), "%s/workspaces/%s",
		         a->cfg.work_dir, id);
		w->port = free_port();
		{
			static const char hex[] = "0123456789abcdef";
			unsigned char rnd[16];

			if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
				r = -EIO;
				snprintf(err, sizeof(err), "no randomness");
				goto fail;
			}
			for (int i = 0; i < 16; i++) {
				w->token[2 * i] = hex[rnd[i] >> 4];
				w->token[2 * i + 1] = hex[rnd[i] & 15];
			}
			w->token[32] = '\0';
		}
		w->idle_timeout_ms =
		    json_integer_value(json_object_get(as, "idle_timeout_s")) *
		    1000;
		w->last_active_ms = now_ms();
	} else {
		snprintf(w->dir, sizeof(w->dir), "%s/jobs/%s", a->cfg.work_dir,
		         id);
	}
	snprintf(w->art, sizeof(w->art), "%s/artifacts", w->dir);
	snprintf(w->ckpt, sizeof(w->ckpt), "%s/checkpoint", w->dir);
	snprintf(w->region, sizeof(w->region), "%s/regions/%s.region",
	         a->cfg.work_dir, id);
	if ((r = mkdirs(w->art)) < 0 || (r = mkdirs(w->ckpt)) < 0) {
		snprintf(err, sizeof(err), "cannot create %s: %s", w->dir,
		         strerror(-r));
		goto fail;
	}
	if (!w->server) {
		fetch_files(a, a->main_cl, w, "inputs", w->dir);
		fetch_files(a, a->main_cl, w, "checkpoints", w->ckpt);
	}
	/* The slice's region: its VRAM quota and compute share. */
	if (w->gpu >= 0) {
		bool whole = blocks >= 100 && !mig;
		struct cnl_region_opts ro = {0};
		char board[600];

		/* Slices of one GPU share its board, so that the time of
		 * idle slices goes to busy ones by share. */
		if (!whole && !mig) {
			snprintf(board, sizeof(board), "%s/regions/gpu%d.board",
			         a->cfg.work_dir, w->gpu);
			if (access(board, R_OK) != 0)
				cnl_board_create(board);
			ro.board = board;
			ro.board_slot = board_slot(a, w->gpu);
			w->board_slot = (int)ro.board_slot;
		}
		r = cnl_region_create(w->region,
		                      whole ? 0 : (uint64_t)vram << 20,
		                      whole || mig ? 0 : (unsigned)blocks,
		                      project ? project : "", &ro);
		if (r < 0) {
			snprintf(err, sizeof(err),
			         "cannot create region %s: %s", w->region,
			         strerror(-r));
			goto fail;
		}
	}
	/* Environment. */
#define ENV(...)                                                         \
	do {                                                             \
		snprintf(env_buf[ne], sizeof(env_buf[ne]), __VA_ARGS__); \
		envp[ne] = env_buf[ne];                                  \
		ne++;                                                    \
	} while (0)
	ENV("PATH=%s",
	    getenv("PATH") ? getenv("PATH") : "/usr/local/bin:/usr/bin:/bin");
	ENV("HOME=%s", w->dir);
	ENV("CNLAB_JOB_ID=%s", id);
	ENV("CNLAB_ARTIFACTS_DIR=%s", w->art);
	ENV("CNLAB_CHECKPOINT_DIR=%s", w->ckpt);
	ENV("CUDA_VISIBLE_DEVICES=%s", cvd);
	if (w->gpu >= 0)
		ENV("CNLAB_REGION=%s", w->region);
	if (w->gpu >= 0 && a->cfg.shim && a->cfg.shim[0] &&
	    access(a->cfg.shim, R_OK) == 0)
		/* Preloaded into the command only, by the watchdog: the
		 * watchdog is this binary and needs no CUDA shim. */
		ENV("CNLAB_WATCHDOG_PRELOAD=%s", a->cfg.shim);
	if (!w->server) {
		/* Its place in its gang (a job alone is rank 0 of 1). */
		ENV("CNLAB_RANK=%d",
		    (int)json_integer_value(json_object_get(gang, "rank")));
		ENV("CNLAB_WORLD_SIZE=%d",
		    gang
		        ? (int)json_integer_value(json_object_get(gang, "size"))
		        : 1);
	}
	if (!w->server && gang) {
		json_t *nodes = json_object_get(gang, "nodes");
		size_t len = sizeof("CNLAB_GANG_NODES="), i;

		ENV("CNLAB_GANG_ID=%s",
		    json_string_value(json_object_get(gang, "id"))
		        ? json_string_value(json_object_get(gang, "id"))
		        : "");
		/* Node names by rank, comma-separated: up to 64 names of
		 * 63 bytes, beyond an env_buf. */
		for (i = 0; i < json_array_size(nodes); i++)
			len +=
			    strlen(json_string_value(json_array_get(nodes, i))
			               ? json_string_value(
			                     json_array_get(nodes, i))
			               : "") +
			    1;
		gang_nodes = cnl_xmalloc(len);
		size_t o =
		    (size_t)snprintf(gang_nodes, len, "CNLAB_GANG_NODES=");
		for (i = 0; i < json_array_size(nodes) && o < len; i++) {
			const char *nm =
			    json_string_value(json_array_get(nodes, i));

			o += (size_t)snprintf(gang_nodes + o, len - o, "%s%s",
			                      i ? "," : "", nm ? nm : "");
		}
		envp[ne++] = gang_nodes;
	}
	if (w->server) {
		ENV("CNLAB_PORT=%d", w->port);
		/* The notebook's own password: only the URL cnlabd shows to
		 * the project carries it. */
		ENV("CNLAB_SERVER_TOKEN=%s", w->token);
		ENV("CNLAB_WORKSPACE=%s", w->dir);
	}
#undef ENV
	envp[ne] = NULL;
	/* The command runs under this binary's watchdog, which kills it
	 * once the lease file is older than the lease: so the work stops
	 * even if the agent itself was killed (see agent.h). */
	snprintf(lease_ms, sizeof(lease_ms), "%lld", (long long)a->lease_ms);
	argv[0] = a->self_exe;
	argv[1] = "--watchdog";
	argv[2] = a->lease;
	argv[3] = lease_ms;
	argv[4] = "/bin/sh";
	argv[5] = "-c";
	argv[6] = w->server ? a->cfg.server_command
	                    : json_string_value(json_object_get(as, "command"));
	argv[7] = NULL;
	if (!argv[6]) {
		r = -CNL_EFIELD;
		snprintf(err, sizeof(err), "assignment has no command");
		goto fail;
	}
	spec.id = id;
	spec.argv = argv;
	spec.env = envp;
	spec.cwd = w->dir;
	spec.cpu_milli = json_integer_value(json_object_get(as, "cpu_milli"));
	spec.mem_bytes = json_integer_value(json_object_get(as, "mem_mib"))
	                 << 20;
	spec.uid = a->cfg.run_as_uid;
	spec.gid = a->cfg.run_as_uid;
	if (a->cfg.map_users) {
		/* Run as the local account named like the submitting user;
		 * a user without one is refused rather than run as root. */
		const char *user =
		    json_string_value(json_object_get(as, "user"));
		struct passwd pw, *res = NULL;
		char pwbuf[4096];

		if (!user ||
		    getpwnam_r(user, &pw, pwbuf, sizeof(pwbuf), &res) != 0 ||
		    !res) {
			r = -CNL_ENOTFOUND;
			snprintf(err, sizeof(err),
			         "no local account for user \"%s\" "
			         "(map_users is on)",
			         user ? user : "?");
			goto fail;
		}
		spec.uid = (int)pw.pw_uid;
		spec.gid = (int)pw.pw_gid;
		/* The workload's directories are its own. */
		if (chown(w->dir, pw.pw_uid, pw.pw_gid) < 0 ||
		    chown(w->art, pw.pw_uid, pw.pw_gid) < 0 ||
		    chown(w->ckpt, pw.pw_uid, pw.pw_gid) < 0 ||
		    (w->gpu >= 0 && chown(w->region, pw.pw_uid, pw.pw_gid) < 0))
			cnl_log(CNL_LOG_WARN, "cannot chown workload dirs",
			        "id=%s err=%s", id, strerror(errno));
	}
	spec.pid_ns = a->cfg.pid_ns;
	spec.mount_ns = a->cfg.mount_ns;
	/* The state first: an agent restarted at any point after the launch
	 * finds it beside the cgroup and re-adopts the workload; one
	 * restarted before the launch finds no cgroup, and starts it if
	 * it is still assigned. */
	save_state(a, w);
	{
		char po[700], pe[700];

		out_path(a, id, "stdout", po, sizeof(po));
		out_path(a, id, "stderr", pe, sizeof(pe));
		spec.stdout_fd =
		    open(po, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		spec.stderr_fd =
		    open(pe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		w->out_rd = open(po, O_RDONLY | O_CLOEXEC);
		w->err_rd = open(pe, O_RDONLY | O_CLOEXEC);
		if (spec.stdout_fd < 0 || spec.stderr_fd < 0 || w->out_rd < 0 ||
		    w->err_rd < 0) {
			r = -errno;
			snprintf(err, sizeof(err), "cannot create %s: %s", po,
			         strerror(errno));
		} else {
			r = cnl_launch(a->launcher, &spec, &w->w, err,
			               sizeof(err));
		}
		if (spec.stdout_fd >= 0)
			close(spec.stdout_fd);
		if (spec.stderr_fd >= 0)
			close(spec.stderr_fd);
		if (r < 0) {
			if (w->out_rd >= 0)
				close(w->out_rd);
			if (w->err_rd >= 0)
				close(w->err_rd);
			goto fail;
		}
	}
	pthread_mutex_lock(&a->mu);
	if (a->n_wk == a->cap_wk) {
		a->cap_wk = a->cap_wk ? 2 * a->cap_wk : 16;
		a->wk = cnl_xrealloc(a->wk, a->cap_wk * sizeof(*a->wk));
	}
	a->wk[a->n_wk++] = w;
	a->started_total++;
	pthread_mutex_unlock(&a->mu);
	cnl_log(CNL_LOG_INFO, "workload started",
	        "id=%s epoch=%" PRId64 " kind=%s gpus=%s", id, w->epoch,
	        w->server ? "server" : "job", cvd[0] ? cvd : "-");
	{
		char url[256];

		snprintf(url, sizeof(url), "http://%s:%d/?token=%s",
		         a->cfg.address, w->port, w->token);
		report(a, a->main_cl, w, "running", 0, w->server ? url : NULL,
		       NULL);
	}
	return;
fail:
	/* A bad assignment is reported failed with the reason; we go on. */
	cnl_log(CNL_LOG_WARN, "cannot start workload", "id=%s err=%s", id, err);
	drop_state(a, id);
	report(a, a->main_cl, w, "failed", 127, NULL, err);
	pthread_mutex_lock(&a->mu);
	mig_release(a, w->mig_uuid);
	pthread_mutex_unlock(&a->mu);
	free(w);
}

/* ---- reconciling --------------------------------------------------------- */

static void reconcile(struct cnl_agent *a, json_t *reply)
{
	json_t *list = json_object_get(reply, "assignments");
	int64_t now = now_ms();

	/* Work we run that is no longer assigned here: moved or ended. */
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->n_wk; i++) {
		struct wk *w = a->wk[i];
		bool listed = false;

		for (size_t k = 0; k < json_array_size(list); k++) {
			json_t *as = json_array_get(list, k);

			if (strcmp(json_string_value(json_object_get(as, "id")),
			           w->id) == 0 &&
			    json_integer_value(json_object_get(as, "epoch")) ==
			        w->epoch)
				listed = true;
		}
		if (!listed && !w->gone && !w->stopping) {
			w->gone = true;
			cnl_workload_kill(w->w);
		}
	}
	pthread_mutex_unlock(&a->mu);
	for (size_t k = 0; k < json_array_size(list); k++) {
		json_t *as = json_array_get(list, k);
		const char *id = json_string_value(json_object_get(as, "id"));
		const char *action =
		    json_string_value(json_object_get(as, "action"));
		int64_t epoch =
		    json_integer_value(json_object_get(as, "epoch"));
		struct wk *w;

		pthread_mutex_lock(&a->mu);
		w = wk_find(a, id);
		if (w && w->epoch == epoch && action &&
		    strcmp(action, "stop") == 0 && !w->stopping) {
			int64_t sig = 0, kill = 0;
			const char *s =
			    json_string_value(json_object_get(as, "signal_at"));
			const char *k2 =
			    json_string_value(json_object_get(as, "kill_at"));

			if (s)
				cnl_time_parse_rfc3339(s, &sig);
			if (k2)
				cnl_time_parse_rfc3339(k2, &kill);
			w->stopping = true;
			w->signal_ms = sig ? sig : now;
			w->kill_ms = kill ? kill : now + 30000;
		}
		pthread_mutex_unlock(&a->mu);
		if (w || !action || strcmp(action, "run") != 0)
			continue;
		/* Nothing new on a lease run out (cnlabd was unreachable, the
		 * heartbeat that renews it is still to come): the workload's
		 * watchdog would kill it at once.  A later poll starts it. */
		if (a->lease_ms > 0 && now - a->last_hb_ok_ms > a->lease_ms)
			continue;
		/* A start after pre-emption waits for the victims to go. */
		const char *nb =
		    json_string_value(json_object_get(as, "not_before"));
		int64_t not_before = 0;

		if (nb && cnl_time_parse_rfc3339(nb, &not_before) == 0 &&
		    not_before > now)
			continue; /* the next poll (bounded wait) retries */
		start(a, as);
	}
}

/* ---- the supervisor ------------------------------------------------------ */

static void send_log(struct cnl_agent *a, struct cnl_client *cl, const char *id,
                     int64_t epoch, const char *stream, char *buf, size_t n)
{
	char route[256], err[256];
	json_t *body, *data;

	for (size_t i = 0; i < n; i++) /* keep JSON strings valid UTF-8 */
		if ((unsigned char)buf[i] >= 0x80 || buf[i] == '\0')
			buf[i] = (unsigned char)buf[i] >= 0x80 ? '?' : ' ';
	if (!(data = json_stringn(buf, n)))
		return;
	body = json_pack("{s:s,s:I,s:s,s:o}", "id", id, "epoch",
	                 (json_int_t)epoch, "stream", stream, "data", data);
	snprintf(route, sizeof(route), "/v1/nodes/%s/logs", a->node_id);
	cnl_client_call(cl, "POST", route, body, 30, NULL, err, sizeof(err));
	json_decref(body);
}

/* Read new output of a file into @buf, advancing @off.  Under the lock. */
static void drain(int fd, char *buf, size_t *n, int64_t *off)
{
	ssize_t got;

	if (fd < 0)
		return;
	while (*n < LOG_CHUNK_MAX &&
	       (got = read(fd, buf + *n, LOG_CHUNK_MAX - *n)) > 0) {
		*n += (size_t)got;
		*off += got;
	}
}

/* Established TCP connections to local @port (IPv4 and IPv6). */
static bool has_connections(int port)
{
	static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	char line[512];

	for (size_t i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "r");

		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			char *colon = strchr(line, ':');
			unsigned lport, st;
			char *p;

			if (!colon || !(p = strchr(colon + 1, ':')))
				continue;
			if (sscanf(p + 1, "%x", &lport) != 1)
				continue;
			/* state is the 4th field */
			char *f3 = strchr(p + 1, ' ');
			if (!f3 || !(f3 = strchr(f3 + 1, ' ')))
				continue;
			if (sscanf(f3 + 1, "%x", &st) == 1 && st == 1 &&
			    (int)lport == port) {
				fclose(f);
				return true;
			}
		}
		fclose(f);
	}
	return false;
}

static void *supervise(void *arg)
{
	struct cnl_agent *a = arg;
	int64_t last_idle_check = 0;

	while (!a->stop) {
		int64_t now = now_ms();
		struct wk *done[64];
		struct cnl_exit ex[64];
		size_t n_done = 0;

		pthread_mutex_lock(&a->mu);
		for (size_t i = 0; i < a->n_wk && n_done < 64; i++) {
			struct wk *w = a->wk[i];
			struct cnl_exit e = {0};

			drain(w->out_rd, w->out, &w->out_n, &w->out_off);
			drain(w->err_rd, w->err_buf, &w->err_n, &w->err_off);
			if (w->stopping && !w->term_sent &&
			    now >= w->signal_ms) {
				cnl_workload_signal(w->w, SIGTERM);
				w->term_sent = true;
			}
			if (w->stopping && now >= w->kill_ms)
				cnl_workload_kill(w->w);
			if (w->server && w->idle_timeout_ms > 0 &&
			    now - last_idle_check >= IDLE_CHECK_MS) {
				struct cnl_region_handle h;
				struct cnl_region_stat st;
				uint64_t busy = 0;

				if (cnl_region_map(w->region, &h) == 0) {
					if (cnl_region_stat(h.r, &st) == 0)
						for (unsigned p = 0;
						     p < st.nprocs; p++)
							busy +=
							    st.procs[p].busy_ns;
					cnl_region_unmap(&h);
				}
				if (busy != w->last_busy_ns ||
				    has_connections(w->port))
					w->last_active_ms = now;
				w->last_busy_ns = busy;
				if (now - w->last_active_ms >=
				        w->idle_timeout_ms &&
				    !w->stopping) {
					cnl_log(CNL_LOG_INFO,
					        "server idle; stopping",
					        "id=%s", w->id);
					w->idle_stopped = true;
					w->stopping = true;
					w->signal_ms = now;
					w->kill_ms = now + 10000;
				}
			}
			if (w->ended) {
				if (now >= w->end_retry_ms) {
					ex[n_done] = e;
					done[n_done++] = w;
				}
				continue;
			}
			if (cnl_workload_poll(w->w, &e) == 0 && e.exited) {
				/* Read what is left of its output first. */
				drain(w->out_rd, w->out, &w->out_n,
				      &w->out_off);
				drain(w->err_rd, w->err_buf, &w->err_n,
				      &w->err_off);
				ex[n_done] = e;
				done[n_done++] = w;
			}
		}
		if (now - last_idle_check >= IDLE_CHECK_MS)
			last_idle_check = now;
		/* Flush logs outside the lock on copies of the ids. */
		struct {
			char id[64];
			int64_t epoch;
			char *o, *e;
			size_t on, en;
		} *logs = cnl_xcalloc(a->n_wk + 1, sizeof(*logs));
		size_t n_logs = 0;
		for (size_t i = 0; i < a->n_wk; i++) {
			struct wk *w = a->wk[i];

			if (!w->out_n && !w->err_n)
				continue;
			memcpy(logs[n_logs].id, w->id, sizeof(w->id));
			logs[n_logs].epoch = w->epoch;
			if (!w->gone) {
				logs[n_logs].o = cnl_xmalloc(w->out_n + 1);
				memcpy(logs[n_logs].o, w->out, w->out_n);
				logs[n_logs].on = w->out_n;
				logs[n_logs].e = cnl_xmalloc(w->err_n + 1);
				memcpy(logs[n_logs].e, w->err_buf, w->err_n);
				logs[n_logs].en = w->err_n;
				n_logs++;
			}
			w->out_n = w->err_n = 0;
			save_state(a, w); /* the offsets, for a restart */
		}
		pthread_mutex_unlock(&a->mu);
		for (size_t i = 0; i < n_logs; i++) {
			if (logs[i].on)
				send_log(a, a->sup_cl, logs[i].id,
				         logs[i].epoch, "stdout", logs[i].o,
				         logs[i].on);
			if (logs[i].en)
				send_log(a, a->sup_cl, logs[i].id,
				         logs[i].epoch, "stderr", logs[i].e,
				         logs[i].en);
			free(logs[i].o);
			free(logs[i].e);
		}
		free(logs);
		/* Ends: artifacts, checkpoint, report. */
		for (size_t i = 0; i < n_done; i++) {
			struct wk *w = done[i];
			const char *state;
			int code = ex[i].exited && ex[i].signal
			               ? 128 + ex[i].signal
			               : ex[i].code;
			char msg[128] = "";

			if (!w->gone && !w->ended) {
				if (!w->server) {
					upload_dir(a, a->sup_cl, w, w->art,
					           "artifacts");
					upload_dir(a, a->sup_cl, w, w->ckpt,
					           "checkpoints");
				}
				if (w->fenced)
					snprintf(msg, sizeof(msg),
					         "stopped by the node agent: "
					         "its lease expired (cnlabd "
					         "unreachable)");
				else if (ex[i].oom_killed)
					snprintf(msg, sizeof(msg),
					         "killed by the out-of-memory "
					         "killer (memory limit)");
				else if (ex[i].signal)
					snprintf(msg, sizeof(msg),
					         "killed by signal %d",
					         ex[i].signal);
				if (w->server)
					state = w->stopping || w->idle_stopped
					            ? "stopped"
					            : "failed";
				else
					state =
					    code == 0 ? "succeeded" : "failed";
				snprintf(w->end_state, sizeof(w->end_state),
				         "%s", state);
				snprintf(w->end_msg, sizeof(w->end_msg), "%s",
				         msg);
				w->end_code = code;
				w->ended = true;
				cnl_log(CNL_LOG_INFO, "workload ended",
				        "id=%s state=%s code=%d", w->id, state,
				        code);
			}
			if (!w->gone) {
				long st = report(
				    a, a->sup_cl, w, w->end_state, w->end_code,
				    NULL, w->end_msg[0] ? w->end_msg : NULL);

				/* Taken (200), or no longer ours (404, 409):
				 * done.  Otherwise try again in a second. */
				if (st != 200 && st != 404 && st != 409) {
					w->end_retry_ms = now_ms() + 1000;
					continue;
				}
			}
			pthread_mutex_lock(&a->mu);
			unlink(w->region);
			{
				char po[700], id[sizeof(w->id)];

				out_path(a, w->id, "stdout", po, sizeof(po));
				unlink(po);
				out_path(a, w->id, "stderr", po, sizeof(po));
				unlink(po);
				/* Its cgroup and exit record before its state:
				 * a cgroup left without a state file would
				 * refuse the next start of this id here. */
				memcpy(id, w->id, sizeof(id));
				a->ended_total++;
				wk_remove(a, w);
				drop_state(a, id);
			}
			pthread_mutex_unlock(&a->mu);
		}
		usleep(100 * 1000);
	}
	return NULL;
}

/* ---- heartbeats ---------------------------------------------------------- */

/*
 * Kill all work, keeping it in the table: its end (failed, with the
 * reason) is reported once cnlabd answers again.  Forgetting it instead
 * would let the next assignment poll start the same (id, epoch) again,
 * since cnlabd, restarted meanwhile, may still hold it as running here.
 */
static void kill_all(struct cnl_agent *a, const char *why)
{
	size_t n = 0;

	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->n_wk; i++) {
		struct wk *w = a->wk[i];

		if (w->gone || w->ended || w->fenced)
			continue;
		w->fenced = true;
		cnl_workload_kill(w->w);
		n++;
	}
	pthread_mutex_unlock(&a->mu);
	if (n)
		cnl_log(CNL_LOG_WARN, "stopped all work", "why=%s n=%zu", why,
		        n);
}

/* Renew the lease the workloads' watchdogs check. */
static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	if (fd >= 0) {
		futimens(fd, NULL);
		close(fd);
	}
}

static void *heartbeat(void *arg)
{
	struct cnl_agent *a = arg;
	char route[256], err[256];

	snprintf(route, sizeof(route), "/v1/nodes/%s/heartbeat", a->node_id);
	while (!a->stop) {
		json_t *running = json_array(), *reply = NULL, *body;
		long st;

		pthread_mutex_lock(&a->mu);
		for (size_t i = 0; i < a->n_wk; i++)
			if (!a->wk[i]->gone)
				json_array_append_new(
				    running,
				    json_pack("{s:s,s:I}", "id", a->wk[i]->id,
				              "epoch",
				              (json_int_t)a->wk[i]->epoch));
		pthread_mutex_unlock(&a->mu);
		body = json_pack("{s:I,s:o}", "epoch",
		                 (json_int_t)a->node_epoch, "running", running);
		st = cnl_client_call(a->hb_cl, "POST", route, body, 10, &reply,
		                     err, sizeof(err));
		json_decref(body);
		if (st == 200) {
			json_t *stop = json_object_get(reply, "stop");

			a->last_hb_ok_ms = now_ms();
			touch(a->lease);
			a->node_epoch =
			    json_integer_value(json_object_get(reply, "epoch"));
			pthread_mutex_lock(&a->mu);
			for (size_t k = 0; k < json_array_size(stop); k++) {
				struct wk *w = wk_find(
				    a,
				    json_string_value(json_array_get(stop, k)));

				if (w && !w->gone) {
					w->gone = true;
					a->fenced_total++;
					cnl_workload_kill(w->w);
					cnl_log(CNL_LOG_WARN,
					        "work was moved; stopped",
					        "id=%s", w->id);
				}
			}
			pthread_mutex_unlock(&a->mu);
		} else if (now_ms() - a->last_hb_ok_ms > a->lease_ms) {
			/* Self-fencing: the control plane may move our work
			 * after twice this; it must be gone by then. */
			kill_all(a, "lease expired: cnlabd unreachable");
		}
		json_decref(reply);
		for (int64_t t = 0; t < a->heartbeat_ms && !a->stop; t += 50)
			usleep(50 * 1000);
	}
	return NULL;
}

/* ---- adoption after a restart ---------------------------------------------
 */

static void adopt(struct cnl_agent *a)
{
	char ids[256][64];
	int n = cnl_launcher_list(a->launcher, ids, 256);

	for (int i = 0; i < n; i++) {
		char path[700];
		json_t *st;
		struct wk *w;

		if ((size_t)snprintf(path, sizeof(path), "%s/state/%.63s.json",
		                     a->cfg.work_dir, ids[i]) >= sizeof(path) ||
		    !(st = json_load_file(path, 0, NULL)))
			continue;
		w = cnl_xcalloc(1, sizeof(*w));
		w->out_rd = w->err_rd = -1;
		w->board_slot = -1;
		snprintf(w->id, sizeof(w->id), "%.63s", ids[i]);
		w->epoch = json_integer_value(json_object_get(st, "epoch"));
		w->server = json_is_true(json_object_get(st, "server"));
		snprintf(w->dir, sizeof(w->dir), "%s",
		         json_string_value(json_object_get(st, "dir")));
		snprintf(w->art, sizeof(w->art), "%s",
		         json_string_value(json_object_get(st, "art")));
		snprintf(w->ckpt, sizeof(w->ckpt), "%s",
		         json_string_value(json_object_get(st, "ckpt")));
		snprintf(w->region, sizeof(w->region), "%s",
		         json_string_value(json_object_get(st, "region")));
		w->port = (int)json_integer_value(json_object_get(st, "port"));
		w->gpu = (int)json_integer_value(json_object_get(st, "gpu"));
		w->idle_timeout_ms =
		    json_integer_value(json_object_get(st, "idle_timeout_ms"));
		w->out_off = json_integer_value(json_object_get(st, "out_off"));
		w->err_off = json_integer_value(json_object_get(st, "err_off"));
		{
			char po[700];

			out_path(a, w->id, "stdout", po, sizeof(po));
			w->out_rd = open(po, O_RDONLY | O_CLOEXEC);
			if (w->out_rd >= 0)
				lseek(w->out_rd, w->out_off, SEEK_SET);
			out_path(a, w->id, "stderr", po, sizeof(po));
			w->err_rd = open(po, O_RDONLY | O_CLOEXEC);
			if (w->err_rd >= 0)
				lseek(w->err_rd, w->err_off, SEEK_SET);
		}
		w->last_active_ms = now_ms();
		json_decref(st);
		if (cnl_launcher_adopt(a->launcher, ids[i], &w->w) < 0) {
			if (w->out_rd >= 0)
				close(w->out_rd);
			if (w->err_rd >= 0)
				close(w->err_rd);
			free(w);
			continue;
		}
		if (a->n_wk == a->cap_wk) {
			a->cap_wk = a->cap_wk ? 2 * a->cap_wk : 16;
			a->wk = cnl_xrealloc(a->wk, a->cap_wk * sizeof(*a->wk));
		}
		a->wk[a->n_wk++] = w;
		cnl_log(CNL_LOG_INFO, "re-adopted workload",
		        "id=%s epoch=%" PRId64, w->id, w->epoch);
	}
}

/* ---- metrics ------------------------------------------------------------- */

static void metrics_serve(void *ud, const struct cnl_http_route *route,
                          struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct cnl_agent *a = ud;
	struct cnl_metrics_buf b = {0};
	const struct cnl_gpu_dev *devs;
	int n;

	if (strcmp(route->pattern, "/healthz") == 0) {
		cnl_http_reply(resp, 200, json_pack("{s:s}", "status", "ok"));
		return;
	}
	pthread_mutex_lock(&a->mu);
	n = cnl_gpus_list(a->gpus, &devs);
	cnl_mb_family(&b, "cnlab_agent_gpu_blocks_allocated", "gauge",
	              "1% blocks of each GPU held by running slices.");
	for (int g = 0; g < n; g++) {
		int64_t blocks = 0;

		for (size_t i = 0; i < a->n_wk; i++) {
			struct cnl_region_handle h;

			if (a->wk[i]->gpu != g ||
			    cnl_region_map(a->wk[i]->region, &h) < 0)
				continue;
			blocks += h.r->share_pct ? h.r->share_pct : 100;
			cnl_region_unmap(&h);
		}
		cnl_mb_printf(&b,
		              "cnlab_agent_gpu_blocks_allocated{gpu=\"%d\","
		              "uuid=\"%s\"} %lld\n",
		              g, devs[g].uuid, (long long)blocks);
	}
	cnl_mb_family(&b, "cnlab_agent_mig_instances", "gauge",
	              "MIG instances created on each GPU.");
	for (int g = 0; g < n; g++)
		cnl_mb_printf(&b, "cnlab_agent_mig_instances{gpu=\"%d\"} %d\n",
		              g, cnl_gpus_mig_count(a->gpus, g));
	cnl_mb_family(&b, "cnlab_agent_slice_vram_bytes", "gauge",
	              "Device memory a slice's processes hold (the shim's "
	              "accounting).");
	for (size_t i = 0; i < a->n_wk; i++) {
		struct cnl_region_handle h;
		struct cnl_region_stat st;

		if (cnl_region_map(a->wk[i]->region, &h) < 0)
			continue;
		if (cnl_region_stat(h.r, &st) == 0)
			cnl_mb_printf(&b,
			              "cnlab_agent_slice_vram_bytes{workload="
			              "\"%s\"} %llu\n",
			              a->wk[i]->id,
			              (unsigned long long)st.used);
		cnl_region_unmap(&h);
	}
	cnl_mb_family(&b, "cnlab_agent_slice_busy_seconds_total", "counter",
	              "GPU time a slice's kernels used (the shim's ledger).");
	for (size_t i = 0; i < a->n_wk; i++) {
		struct cnl_region_handle h;
		struct cnl_region_stat st;
		uint64_t busy = 0;

		if (cnl_region_map(a->wk[i]->region, &h) < 0)
			continue;
		if (cnl_region_stat(h.r, &st) == 0)
			for (unsigned p = 0; p < st.nprocs; p++)
				busy += st.procs[p].busy_ns;
		cnl_region_unmap(&h);
		cnl_mb_printf(&b,
		              "cnlab_agent_slice_busy_seconds_total{workload="
		              "\"%s\"} %.6f\n",
		              a->wk[i]->id, (double)busy / 1e9);
	}
	cnl_mb_family(&b, "cnlab_agent_workloads", "gauge",
	              "Workloads on this node by kind.");
	{
		int jobs = 0, servers = 0;

		for (size_t i = 0; i < a->n_wk; i++)
			a->wk[i]->server ? servers++ : jobs++;
		cnl_mb_printf(&b, "cnlab_agent_workloads{kind=\"job\"} %d\n",
		              jobs);
		cnl_mb_printf(&b, "cnlab_agent_workloads{kind=\"server\"} %d\n",
		              servers);
	}
	cnl_mb_family(&b, "cnlab_agent_workloads_started_total", "counter",
	              "Workloads started since the agent started.");
	cnl_mb_printf(&b, "cnlab_agent_workloads_started_total %llu\n",
	              (unsigned long long)a->started_total);
	cnl_mb_family(&b, "cnlab_agent_workloads_ended_total", "counter",
	              "Workloads ended since the agent started.");
	cnl_mb_printf(&b, "cnlab_agent_workloads_ended_total %llu\n",
	              (unsigned long long)a->ended_total);
	pthread_mutex_unlock(&a->mu);
	resp->status = 200;
	resp->text = b.p ? b.p : cnl_xstrdup("");
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

static void no_handler(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
}

static const struct cnl_http_route metrics_routes[] = {
    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, no_handler},
    {"GET", "/metrics", CNL_PERM_PUBLIC, NULL, no_handler},
};

/* ---- life cycle ---------------------------------------------------------- */

int cnl_agent_new(const struct cnl_agent_config *cfg, struct cnl_agent **ret,
                  char *err, size_t errlen)
{
	struct cnl_agent *a = cnl_xcalloc(1, sizeof(*a));
	/* Each request says how long it may take; a reply past 16 MiB is
	 * not one cnlabd sends. */
	struct cnl_client_config ccfg = {
	    .base = cfg->server,
	    .token = cfg->token,
	    .cafile = cfg->cafile,
	    .connect_timeout_ms = 5 * 1000,
	    .reply_max = (size_t)16 << 20,
	};
	char path[600];
	int r;

	a->cfg = *cfg;
	pthread_mutex_init(&a->mu, NULL);
	cnl_catalog_init(&a->cat);
	if ((r = cnl_gpus_open(cfg->gpus, &a->cat, &a->gpus, err, errlen)) < 0)
		goto fail;
	static const char *const sub[] = {"jobs", "workspaces", "regions",
	                                  "state", "exits"};
	for (size_t i = 0; i < CNL_ARRAY_SIZE(sub); i++) {
		snprintf(path, sizeof(path), "%s/%s", cfg->work_dir, sub[i]);
		if ((r = mkdirs(path)) < 0) {
			snprintf(err, errlen, "%s: %s", path, strerror(-r));
			goto fail;
		}
	}
	snprintf(path, sizeof(path), "%s/exits", cfg->work_dir);
	if ((r = cnl_launcher_new(cfg->name, path, &a->launcher, err, errlen)) <
	    0)
		goto fail;
	if ((r = cnl_client_new(&ccfg, &a->main_cl)) < 0 ||
	    (r = cnl_client_new(&ccfg, &a->hb_cl)) < 0 ||
	    (r = cnl_client_new(&ccfg, &a->sup_cl)) < 0) {
		snprintf(err, errlen, "bad server URL or token");
		goto fail;
	}
	ssize_t n =
	    readlink("/proc/self/exe", a->self_exe, sizeof(a->self_exe) - 1);
	if (n <= 0) {
		r = -errno;
		snprintf(err, errlen, "cannot find my own binary");
		goto fail;
	}
	a->self_exe[n] = '\0';
	snprintf(a->lease, sizeof(a->lease), "%s/lease", cfg->work_dir);
	*ret = a;
	return 0;
fail:
	cnl_agent_free(a);
	return r;
}

static int register_node(struct cnl_agent *a, char *err, size_t errlen)
{
	const struct cnl_gpu_dev *devs;
	int n = cnl_gpus_list(a->gpus, &devs);
	struct cnl_wire_register m = {.protocol = CNL_WIRE_PROTOCOL};
	struct cnl_wire_node node;
	json_t *body, *reply = NULL;
	long st;
	int r;

	if (n > CNL_WIRE_GPUS_MAX)
		n = CNL_WIRE_GPUS_MAX;
	snprintf(m.name, sizeof(m.name), "%s", a->cfg.name);
	snprintf(m.gpu_type, sizeof(m.gpu_type), "%s", n ? devs[0].type : "");
	m.gpus = n;
	m.cpu_milli = a->cfg.cpu_milli;
	m.mem_mib = a->cfg.mem_mib;
	snprintf(m.address, sizeof(m.address), "%s", a->cfg.address);
	m.has_devices = true;
	for (int i = 0; i < n; i++) {
		struct cnl_wire_device *d = &m.devices[m.n_devices++];

		d->index = devs[i].index;
		snprintf(d->uuid, sizeof(d->uuid), "%s", devs[i].uuid);
		d->mem_mib = (int64_t)devs[i].mem_mib;
		d->healthy = devs[i].healthy;
	}
	snprintf(m.cluster, sizeof(m.cluster), "%s",
	         a->cfg.cluster ? a->cfg.cluster : "");
	snprintf(m.zone, sizeof(m.zone), "%s", a->cfg.zone ? a->cfg.zone : "");
	snprintf(m.rack, sizeof(m.rack), "%s", a->cfg.rack ? a->cfg.rack : "");
	/* Sent on every registration: a restart with another list relabels
	 * the node. */
	for (const char *p = a->cfg.datasets; p && *p;) {
		size_t len = strcspn(p, ",");

		if (m.n_datasets < CNL_WIRE_DATASETS_MAX)
			snprintf(m.datasets[m.n_datasets++],
			         sizeof(m.datasets[0]), "%.*s", (int)len, p);
		m.has_datasets = true;
		p += len + (p[len] == ',');
	}
	body = cnl_wire_register_encode(&m);
	st = cnl_client_call(a->main_cl, "POST", "/v1/nodes", body, 30, &reply,
	                     err, errlen);
	json_decref(body);
	if (st != 200 && st != 201) {
		json_decref(reply);
		return st < 0 ? (int)st : -CNL_ECONFIG;
	}
	r = cnl_wire_node_decode(reply, &node, err, errlen);
	json_decref(reply);
	if (r < 0) {
		cnl_wire_node_done(&node);
		return -EPROTO;
	}
	snprintf(a->node_id, sizeof(a->node_id), "%s", node.id);
	a->node_epoch = node.epoch;
	a->lease_ms = node.lease_ms;
	a->heartbeat_ms = node.heartbeat_ms > 0 ? node.heartbeat_ms : 1000;
	cnl_wire_node_done(&node);
	return 0;
}

int cnl_agent_run(struct cnl_agent *a)
{
	char err[512];
	int r;

	/* cnlabd may start after us: retry registration until it answers. */
	while ((r = register_node(a, err, sizeof(err))) == -EIO && !a->stop) {
		cnl_log(CNL_LOG_WARN, "cnlabd unreachable; retrying", "err=%s",
		        err);
		sleep(1);
	}
	if (r < 0) {
		cnl_log(CNL_LOG_ERROR, "registration refused", "err=%s", err);
		return r;
	}
	cnl_log(CNL_LOG_INFO, "registered", "node=%s id=%s epoch=%" PRId64,
	        a->cfg.name, a->node_id, a->node_epoch);
	touch(a->lease);
	adopt(a);
	a->last_hb_ok_ms = now_ms();
	if (a->cfg.listen) {
		char host[64];
		const char *colon = strrchr(a->cfg.listen, ':');
		struct cnl_http_config hc = {0};

		if (colon && (size_t)(colon - a->cfg.listen) < sizeof(host)) {
			memcpy(host, a->cfg.listen,
			       (size_t)(colon - a->cfg.listen));
			host[colon - a->cfg.listen] = '\0';
			hc.host = host;
			hc.port = (uint16_t)strtoul(colon + 1, NULL, 10);
			hc.routes = metrics_routes;
			hc.nroutes = CNL_ARRAY_SIZE(metrics_routes);
			hc.serve = metrics_serve;
			hc.ud = a;
			if (cnl_http_server_new(&hc, &a->metrics, err,
			                        sizeof(err)) < 0)
				cnl_log(CNL_LOG_ERROR, "metrics", "err=%s",
				        err);
			else
				cnl_log(
				    CNL_LOG_INFO, "metrics", "listen=%s:%u",
				    host,
				    (unsigned)cnl_http_server_port(a->metrics));
		}
	}
	pthread_create(&a->hb_thread, NULL, heartbeat, a);
	pthread_create(&a->sup_thread, NULL, supervise, a);
	while (!a->stop) {
		char route[256];
		json_t *reply = NULL;
		long st;

		snprintf(route, sizeof(route),
		         "/v1/nodes/%s/assignments?since=%llu&wait=2",
		         a->node_id, (unsigned long long)a->version);
		st = cnl_client_call(a->main_cl, "GET", route, NULL, 30, &reply,
		                     err, sizeof(err));
		if (st == 200) {
			a->version = (uint64_t)json_integer_value(
			    json_object_get(reply, "version"));
			reconcile(a, reply);
		} else {
			usleep(500 * 1000);
		}
		json_decref(reply);
	}
	pthread_join(a->hb_thread, NULL);
	pthread_join(a->sup_thread, NULL);
	return 0;
}

void cnl_agent_stop(struct cnl_agent *a)
{
	a->stop = true;
}

unsigned cnl_agent_metrics_port(const struct cnl_agent *a)
{
	return a->metrics ? cnl_http_server_port(a->metrics) : 0;
}

void cnl_agent_free(struct cnl_agent *a)
{
	if (!a)
		return;
	cnl_http_server_free(a->metrics);
	for (size_t i = 0; i < a->n_wk; i++) {
		/* Workloads keep running: a restarted agent re-adopts them.
		 * Those that ended keep their cgroup and exit record too:
		 * their end is not reported yet, and the next agent can
		 * only report it if it finds them. */
		cnl_workload_release(a->wk[i]->w);
		if (a->wk[i]->out_rd >= 0)
			close(a->wk[i]->out_rd);
		if (a->wk[i]->err_rd >= 0)
			close(a->wk[i]->err_rd);
		free(a->wk[i]);
	}
	free(a->wk);
	cnl_client_free(a->main_cl);
	cnl_client_free(a->hb_cl);
	cnl_client_free(a->sup_cl);
	cnl_launcher_free(a->launcher);
	cnl_gpus_close(a->gpus);
	pthread_mutex_destroy(&a->mu);
	free(a);
}
