/*
 * supervisor.c - running the work (agent-internal.h has the map): turning
 * an assignment (struct cnl_wire_assignment, decoded by the poll in
 * agent.c) into a launched workload, reconciling the table with each
 * assignment list, and the supervise thread, which drains each workload's
 * output to cnlabd, applies stop deadlines, stops idle notebook servers
 * and, when a workload ends, uploads its files and reports its end.
 *
 * A local workload (struct wk) exists from the moment its assignment is
 * started until its end has been reported (or it was moved away).  An
 * assignment (id, epoch) is started at most once: its state file is
 * written before its launch (wk.c), a workload whose end cnlabd has not
 * taken yet stays in the table, reported again each second, and the last
 * ones forgotten are remembered (an assignment list older than their end
 * report does not start them again).
 *
 * The supervise thread waits on events (cnl_agent_supervise says which),
 * never a fixed sleep: output goes to cnlabd as it is written, an end is
 * reported as soon as the workload's supervisor exits.
 */
#define _GNU_SOURCE /* fallocate: the output delivered frees its blocks */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "agent/oci.h"
#include "agent/share.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/otel.h"
#include "shim/region.h"

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

/* The lowest board row no running or starting slice of GPU @gpu holds,
 * taken for @w at once (starts run side by side). */
static unsigned board_slot(struct cnl_agent *a, struct wk *w, int gpu)
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
		for (size_t i = 0; i < CNL_ARRAY_SIZE(a->starting); i++)
			if (a->starting[i] && a->starting[i] != w &&
			    a->starting[i]->gpu == gpu &&
			    a->starting[i]->board_slot == (int)slot)
				taken = true;
		if (taken)
			slot++;
	}
	w->board_slot = (int)slot;
	pthread_mutex_unlock(&a->mu);
	return slot;
}

/* A notebook server's access token: 32 hex digits. */
static int make_token(char token[33])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	for (int i = 0; i < 16; i++) {
		token[2 * i] = hex[rnd[i] >> 4];
		token[2 * i + 1] = hex[rnd[i] & 15];
	}
	token[32] = '\0';
	return 0;
}

/* "CNLAB_GANG_NODES=" and the gang's node names by rank, comma-separated:
 * up to 64 names of 63 bytes, beyond an env_buf.  To free(). */
static char *gang_nodes_env(const struct cnl_wire_gang *g)
{
	size_t len = sizeof("CNLAB_GANG_NODES="), o;
	char *s;

	for (int i = 0; i < g->n_nodes; i++)
		len += strlen(g->nodes[i]) + 1;
	s = cnl_xmalloc(len);
	o = (size_t)snprintf(s, len, "CNLAB_GANG_NODES=");
	for (int i = 0; i < g->n_nodes && o < len; i++)
		o += (size_t)snprintf(s + o, len - o, "%s%s", i ? "," : "",
		                      g->nodes[i]);
	return s;
}

/* The slice's processes write the region's accounting file, never its
 * limits (region.h): only the former becomes the tenant's. */
static int chown_acct(const char *region, uid_t uid, gid_t gid)
{
	char acct[700];

	if (cnl_region_acct_path(region, acct, sizeof(acct)) < 0)
		return -1;
	return chown(acct, uid, gid);
}

/* Bare isolation: the uid to run as (map_users, run_as_uid); never root
 * (cnl_agent_container_init refused a root agent without either). */
static int bare_user(struct cnl_agent *a, struct wk *w,
                     const struct cnl_wire_assignment *as,
                     struct cnl_launch_spec *spec, char *err, size_t errlen)
{
	struct passwd pw, *res = NULL;
	char pwbuf[4096];

	spec->uid = a->cfg.run_as_uid;
	spec->gid = a->cfg.run_as_uid;
	if (!a->cfg.map_users) {
		/* Its folders (0700) are the uid's it runs as. */
		if (spec->uid >= 0 &&
		    (cnl_agent_chown_tree(w->dir, spec->uid, spec->gid) < 0 ||
		     (w->gpu >= 0 && chown_acct(w->region, (uid_t)spec->uid,
		                                (gid_t)spec->gid) < 0)))
			cnl_log(CNL_LOG_WARN, "cannot chown workload dirs",
			        "id=%s err=\"%s\"", w->id, strerror(errno));
		return 0;
	}
	/* Run as the local account named like the submitting user; a user
	 * without one (or root) is refused rather than run as root. */
	if (!as->user[0] ||
	    getpwnam_r(as->user, &pw, pwbuf, sizeof(pwbuf), &res) != 0 ||
	    !res || pw.pw_uid == 0) {
		snprintf(err, errlen,
		         "no local account for user \"%s\" (map_users is on)",
		         as->user[0] ? as->user : "?");
		return -CNL_ENOTFOUND;
	}
	spec->uid = (int)pw.pw_uid;
	spec->gid = (int)pw.pw_gid;
	/* The workload's directories are its own. */
	if (cnl_agent_chown_tree(w->dir, (int)pw.pw_uid, (int)pw.pw_gid) < 0 ||
	    (w->gpu >= 0 && chown_acct(w->region, pw.pw_uid, pw.pw_gid) < 0))
		cnl_log(CNL_LOG_WARN, "cannot chown workload dirs",
		        "id=%s err=\"%s\"", w->id, strerror(errno));
	return 0;
}

/* Container isolation: the bundle of @w, and the launch of the runtime
 * that runs it (argv in @rt_argv, its state directory in @rt_root). */
static int container_spec(struct cnl_agent *a, struct wk *w,
                          const struct cnl_wire_assignment *as,
                          const char *const *envp, const char *command,
                          const char *shim, struct cnl_launch_spec *spec,
                          char *bundle, size_t bundle_len, const char **rt_argv,
                          char *rt_root, size_t rt_root_len,
                          const char *secrets, char *err, size_t errlen)
{
	static const char *const rt_env[] = {
	    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	    NULL};
	char board[600] = "", nv[40][40];
	const char *devices[CNL_ARRAY_SIZE(nv) + 1];
	char host_path[600], lower[700], ssh[600] = "";
	char **image_env = NULL;
	unsigned base, tenant;
	const struct cnl_gpu_dev *devs;
	int ndev = cnl_gpus_list(a->gpus, &devs);
	bool amd = strcmp(cnl_gpus_vendor(a->gpus), "amd") == 0;
	int nd = 0, r;

	/* By the user's id, not name: a name used again later is another
	 * user, who must not inherit the range. */
	if ((r = cnl_agent_user_range(a, as->user_id, &base)) < 0) {
		snprintf(err, errlen, "no host id range for user \"%s\": %s",
		         as->user, cnl_strerror(r));
		return r;
	}
	tenant = base + CNL_OCI_TENANT_ID;
	/* Everything of the workload belongs to the tenant's host uid, and
	 * only to it. */
	r = cnl_agent_chown_tree(w->dir, (int)tenant, (int)tenant);
	if (r == 0 && chmod(w->dir, 0700) < 0)
		r = -errno;
	if (r == 0 && w->gpu >= 0 && chown_acct(w->region, tenant, tenant) < 0)
		r = -errno;
	if (r < 0) {
		snprintf(err, errlen, "cannot hand %s to the tenant: %s",
		         w->dir, strerror(-r));
		return r;
	}
	/* A server's ssh folder (`cnlab server ssh`, tunnel.c). */
	if (w->server && (r = cnl_agent_ssh_prepare(a, w->id, tenant, ssh,
	                                            sizeof(ssh))) < 0) {
		snprintf(err, errlen, "cannot make its ssh folder: %s",
		         strerror(-r));
		return r;
	}
	if (w->board_slot >= 0 &&
	    cnl_agent_slice_board(a->cfg.work_dir, w->gpu, as->gpu.mig_profile,
	                          as->gpu.mig_start, board, sizeof(board)) == 0)
		(void)chmod(board, 0666);
	else
		board[0] = 0;
	/* The allocation's device nodes, where the node has them (the fake
	 * provider has none): those of its CDI devices (AMD: /dev/kfd and
	 * the GPUs' render nodes). */
	if (w->gpu >= 0 && amd)
		nd = cnl_agent_amd_nodes(devs, ndev, as->gpu.gpu_mask, nv,
		                         (int)CNL_ARRAY_SIZE(nv));
	else if (w->gpu >= 0)
		nd = cnl_agent_gpu_nodes(as->gpu.gpu_mask, nv,
		                         (int)CNL_ARRAY_SIZE(nv));
	for (int i = 0; i < nd; i++)
		devices[i] = nv[i];
	devices[nd] = NULL;
	/* Its image, fetched and unpacked on first use ("host": none). */
	if (as->image[0]) {
		int64_t t0 = cnl_otel_now_ns();

		r = cnl_agent_image_get(a, as->image, as->image_digest,
		                        as->image_bytes, lower, sizeof(lower),
		                        &image_env, err, errlen);
		cnl_agent_trace_step("agent.image", t0, r, err);
		if (r < 0)
			return r;
		snprintf(w->image, sizeof(w->image), "%s",
		         as->image_digest + 7);
	}
	r = cnl_agent_bundle(a,
	                     &(struct cnl_agent_ctr){
	                         .id = w->id,
	                         .user = as->user,
	                         .command = command,
	                         .env = envp,
	                         .workspace = w->dir,
	                         .shim = shim,
	                         .hip = amd,
	                         .region = w->gpu >= 0 ? w->region : NULL,
	                         .board = board,
	                         .devices = devices,
	                         .host_id_base = base,
	                         /* Gang members reach each other through
	                          * the node's network; a server is reached
	                          * through its forwarder (forward.h). */
	                         .host_network = as->has_gang,
	                         .image_root = as->image[0] ? lower : NULL,
	                         .image_env = image_env,
	                         .secrets = secrets,
	                         .ssh = ssh,
	                     },
	                     bundle, bundle_len, err, errlen);
	free(image_env);
	if (r < 0)
		return r;
	snprintf(rt_root, rt_root_len, "%s/crun", cnl_agent_rundir(a));
	rt_argv[0] = a->runtime;
	rt_argv[1] = "--cgroup-manager=disabled";
	rt_argv[2] = "--root";
	rt_argv[3] = rt_root;
	rt_argv[4] = "run";
	rt_argv[5] = "--bundle";
	/* The runtime finds the bundle through the workload's view. */
	snprintf(host_path, sizeof(host_path), "%s", bundle);
	cnl_agent_view(a, host_path, bundle, bundle_len);
	rt_argv[6] = bundle;
	rt_argv[7] = w->id;
	rt_argv[8] = NULL;
	spec->argv = rt_argv;
	spec->exe_fd = a->runtime_fd;
	spec->env = rt_env;
	spec->cwd = "/";
	spec->uid = spec->gid = -1;
	spec->mount_ns = true;
	spec->hide_mount = a->hide_mount[0] ? a->hide_mount : NULL;
	spec->bind_src = a->cfg.work_dir;
	spec->bind_dst = CNL_AGENT_VIEW;
	return 0;
}

/* Start the assignment @as as @w (new, in a->starting), talking to cnlabd
 * through @cl (the calling thread's client); called without the lock.
 * True when @w went into the table; false when the start failed and was
 * reported (@w is then the caller's to take out of a->starting and
 * free). */
static bool start(struct cnl_agent *a, struct cnl_client *cl,
                  const struct cnl_wire_assignment *as, struct wk *w)
{
	const char *id = as->id;
	const struct cnl_wire_slice *gpu = &as->gpu;
	const char *mig = gpu->mig_profile[0] ? gpu->mig_profile : NULL;
	const struct cnl_gpu_dev *devs;
	int ndev = cnl_gpus_list(a->gpus, &devs);
	char cvd[256] = "", err[1400], env_buf[20][700];
	/* AMD: the GPUs by unique ID for ROCr, then HIP's own numbering of
	 * what ROCr shows (0..n-1); CUDA_VISIBLE_DEVICES is not set, since
	 * HIP reads it too, as an alias of HIP_VISIBLE_DEVICES. */
	bool amd = strcmp(cnl_gpus_vendor(a->gpus), "amd") == 0;
	char rocr[640] = "", hvd[96] = "";
	int nvis = 0;
	_cleanup_free_ char *gang_nodes = NULL;
	const char *envp[64 + CNL_WIRE_SECRETS_MAX], *argv[4], *rt_argv[12],
	    *command, *shim;
	struct cnl_agent_secrets sec = {0};
	char bundle[600], rt_root[600], ws_root[600];
	struct cnl_launch_spec spec = {0};
	struct cnl_span launch;
	int64_t t0;
	bool ctr;
	int ne = 0, first = -1, r;

	cnl_agent_trace_begin(&launch, as, w);
	w->server = as->kind == CNL_WIRE_SERVER;
	snprintf(w->project, sizeof(w->project), "%s", as->project_id);
	snprintf(w->user, sizeof(w->user), "%s",
	         as->user[0] ? as->user : as->user_id);
	snprintf(w->mig_profile, sizeof(w->mig_profile), "%s",
	         gpu->mig_profile);
	w->mig_start = gpu->mig_profile[0] ? gpu->mig_start : -1;
	/* GPUs: indexes of the mask, or the MIG instance's UUID. */
	for (int i = 0; i < ndev && i < 32; i++)
		if (gpu->gpu_mask >> i & 1) {
			size_t l = strlen(cvd);

			snprintf(cvd + l, sizeof(cvd) - l, "%s%d", l ? "," : "",
			         devs[i].index);
			l = strlen(rocr);
			snprintf(rocr + l, sizeof(rocr) - l, "%s%s",
			         l ? "," : "", devs[i].uuid);
			l = strlen(hvd);
			snprintf(hvd + l, sizeof(hvd) - l, "%s%d", l ? "," : "",
			         nvis++);
			if (first < 0)
				first = i;
		}
	/* Other starts read it (board_slot). */
	pthread_mutex_lock(&a->mu);
	w->gpu = first;
	pthread_mutex_unlock(&a->mu);
	if (w->gpu >= 0 && gpu->blocks > 0 && ndev == 0) {
		r = -CNL_ENODE;
		snprintf(err, sizeof(err), "this node has no GPU");
		goto fail;
	}
	if (w->gpu < 0 && gpu->gpu_mask) {
		r = -CNL_ENODE;
		snprintf(err, sizeof(err),
		         "assignment names GPU mask 0x%llx; this node has %d "
		         "GPUs",
		         (long long)gpu->gpu_mask, ndev);
		goto fail;
	}
	if (mig && w->gpu >= 0) {
		r = cnl_gpus_mig_create(a->gpus, w->gpu, mig, gpu->mig_start,
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
		/* In a container the server listens in its own network
		 * namespace; the same port on the node's loopback is the
		 * forwarder's, held from now on (users come through
		 * cnlabd's proxy, tunnel.c).  Bare, a free port of the
		 * node. */
		if (a->cfg.bare) {
			w->port = free_port();
		} else if ((r = cnl_fwd_start(a->launcher, id, "127.0.0.1", 0,
		                              &w->fwd, &w->port)) < 0) {
			snprintf(
			    err, sizeof(err),
			    "cannot listen on 127.0.0.1 for the server: %s",
			    cnl_strerror(r));
			goto fail;
		}
		if ((r = make_token(w->token)) < 0) {
			snprintf(err, sizeof(err), "no randomness");
			goto fail;
		}
		w->idle_timeout_ms = as->idle_timeout_s * 1000;
		w->last_active_ms = cnl_time_now_ms();
	} else {
		snprintf(w->dir, sizeof(w->dir), "%s/jobs/%s", a->cfg.work_dir,
		         id);
	}
	snprintf(w->art, sizeof(w->art), "%s/artifacts", w->dir);
	snprintf(w->ckpt, sizeof(w->ckpt), "%s/checkpoint", w->dir);
	snprintf(w->region, sizeof(w->region), "%s/regions/%s.region",
	         a->cfg.work_dir, id);
	/* A job starts from an empty folder: what an earlier run of it left
	 * (links the tenant made among them) is gone before the agent writes
	 * there as root; its inputs and checkpoint come from cnlabd again. */
	if (!w->server)
		cnl_agent_rmtree(w->dir);
	/* A server's workspace: its volume, of the size it asked for,
	 * mounted before anything is written there. */
	if (w->server && (r = cnl_agent_workspace_open(a, w, as->storage_gb,
	                                               err, sizeof(err))) < 0)
		goto fail;
	if (w->server && r == 1)
		cnl_log(
		    CNL_LOG_WARN,
		    "workspace kept as a folder: it holds files from before "
		    "volumes; its size is not enforced",
		    "id=%s dir=%s", id, w->dir);
	if ((r = cnl_agent_wk_dirs(w)) < 0) {
		snprintf(err, sizeof(err), "cannot create %s: %s", w->dir,
		         strerror(-r));
		goto fail;
	}
	if (!w->server &&
	    ((r = cnl_agent_fetch_files(a, cl, w, "inputs", w->dir, err,
	                                sizeof(err))) < 0 ||
	     (r = cnl_agent_fetch_files(a, cl, w, "checkpoints", w->ckpt, err,
	                                sizeof(err))) < 0))
		goto fail;
	/* The slice's region: its VRAM quota and compute share, the share
	 * in terms of the device its processes see (the GPU, or inside MIG
	 * the instance; share.h). */
	if (w->gpu >= 0) {
		bool whole = gpu->blocks >= 100 && !mig;
		struct cnl_region_opts ro = {0};
		struct cnl_slice_share sh;
		char board[600];
		int t = cnl_catalog_find(&a->cat, devs[w->gpu].type);

		r = cnl_agent_slice_share(t >= 0 ? &a->cat.types[t] : NULL,
		                          gpu->blocks, mig, &sh);
		if (r < 0) {
			snprintf(err, sizeof(err),
			         "no compute share for %d blocks of %s%s%s: %s",
			         gpu->blocks, devs[w->gpu].type, mig ? " " : "",
			         mig ? mig : "", cnl_strerror(r));
			goto fail;
		}
		/* Slices of one device share its board, so that the time of
		 * idle slices goes to busy ones by share. */
		if (sh.board) {
			r = cnl_agent_slice_board(a->cfg.work_dir, w->gpu, mig,
			                          gpu->mig_start, board,
			                          sizeof(board));
			if (r < 0) {
				snprintf(err, sizeof(err),
				         "board path too long under %s",
				         a->cfg.work_dir);
				goto fail;
			}
			/* Under the lock: two starts on one GPU create
			 * its board once. */
			pthread_mutex_lock(&a->mu);
			if (access(board, R_OK) != 0)
				cnl_board_create(board);
			pthread_mutex_unlock(&a->mu);
			ro.board = board;
			ro.board_slot = board_slot(a, w, w->gpu);
		}
		/* The agent's own record of the quota, which the GPU
		 * memory audit holds the slice to (gpu_audit.h). */
		w->vram_bytes = whole ? -1 : gpu->vram_mib << 20;
		r = cnl_region_create(w->region,
		                      whole ? 0 : (uint64_t)gpu->vram_mib << 20,
		                      sh.share_pct, as->project_id, &ro);
		if (r < 0) {
			snprintf(err, sizeof(err),
			         "cannot create region %s: %s", w->region,
			         strerror(-r));
			goto fail;
		}
	}
	/* Its secrets (secrets.c), as the tenant's files on a tmpfs. */
	if (as->secrets > 0) {
		unsigned base = 0;

		if (!a->cfg.bare &&
		    (r = cnl_agent_user_range(a, as->user_id, &base)) < 0) {
			snprintf(err, sizeof(err),
			         "no host id range for user \"%s\": %s",
			         as->user, cnl_strerror(r));
			goto fail;
		}
		t0 = cnl_otel_now_ns();
		r = cnl_agent_secrets_fetch(a, cl, w,
		                            (uid_t)(base + CNL_OCI_TENANT_ID),
		                            &sec, err, sizeof(err));
		cnl_agent_trace_step("agent.secrets", t0, r, err);
		if (r < 0)
			goto fail;
	}
	/* Environment: all the command gets; in a container, in the
	 * container's terms. */
	ctr = !a->cfg.bare;
#define ENV(...)                                                         \
	do {                                                             \
		snprintf(env_buf[ne], sizeof(env_buf[ne]), __VA_ARGS__); \
		envp[ne] = env_buf[ne];                                  \
		ne++;                                                    \
	} while (0)
	ENV("PATH=%s", ctr || !getenv("PATH") ? "/usr/local/bin:/usr/bin:/bin"
	                                      : getenv("PATH"));
	ENV("HOME=%s", ctr ? "/workspace" : w->dir);
	ENV("LANG=C.UTF-8");
	ENV("CNLAB_JOB_ID=%s", id);
	ENV("CNLAB_ARTIFACTS_DIR=%s", ctr ? "/workspace/artifacts" : w->art);
	ENV("CNLAB_CHECKPOINT_DIR=%s", ctr ? "/workspace/checkpoint" : w->ckpt);
	if (amd) {
		ENV("ROCR_VISIBLE_DEVICES=%s", rocr);
		ENV("HIP_VISIBLE_DEVICES=%s", hvd);
	} else {
		ENV("CUDA_VISIBLE_DEVICES=%s", cvd);
	}
	if (w->gpu >= 0)
		ENV("CNLAB_REGION=%s", w->region);
	/* The HIP shim on AMD nodes, the CUDA shim elsewhere. */
	shim = amd ? a->cfg.shim_hip : a->cfg.shim;
	shim = w->gpu >= 0 && shim && shim[0] && access(shim, R_OK) == 0 ? shim
	                                                                 : NULL;
	/* Bare, the shim is only preloaded; in a container it is in
	 * /etc/ld.so.preload, which the tenant cannot change. */
	if (shim && !ctr)
		ENV("LD_PRELOAD=%s", shim);
	if (!w->server) {
		/* Its place in its gang (a job alone is rank 0 of 1). */
		ENV("CNLAB_RANK=%d", as->has_gang ? as->gang.rank : 0);
		ENV("CNLAB_WORLD_SIZE=%d", as->has_gang ? as->gang.size : 1);
	}
	if (!w->server && as->has_gang) {
		ENV("CNLAB_GANG_ID=%s", as->gang.id);
		gang_nodes = gang_nodes_env(&as->gang);
		envp[ne++] = gang_nodes;
	}
	if (w->server) {
		ENV("CNLAB_PORT=%d", w->port);
		/* cnlabd's proxy passes the path whole: the server's pages
		 * live under it. */
		ENV("CNLAB_BASE_URL=/s/%s/", id);
		/* The notebook's own password: only the URL cnlabd shows to
		 * the project carries it. */
		ENV("CNLAB_SERVER_TOKEN=%s", w->token);
		ENV("CNLAB_WORKSPACE=%s", ctr ? "/workspace" : w->dir);
		/* The tokened fallback of the default server command. */
		if (a->notebook[0])
			ENV("CNLAB_NOTEBOOK=%s",
			    ctr ? CNL_AGENT_NOTEBOOK : a->notebook);
	}
	if (sec.dir[0])
		ENV("CNLAB_SECRETS_DIR=/run/secrets");
#undef ENV
	/* Secrets asked for as variables, last: nothing above may be
	 * replaced by one (the server refuses those names too). */
	for (int i = 0; i < sec.n_env; i++)
		envp[ne++] = sec.env[i];
	envp[ne] = NULL;
	command = w->server ? a->cfg.server_command : as->command;
	if (!command || (!w->server && !command[0])) {
		r = -CNL_EFIELD;
		snprintf(err, sizeof(err), "assignment has no command");
		goto fail;
	}
	/* The lease: the launcher's supervisor stops the work once the
	 * lease file is older than the lease, even if the agent itself
	 * was killed (see agent.h). */
	spec.lease_path = a->lease;
	spec.lease_ms = a->lease_ms;
	spec.supervisor = a->init[0] ? a->init : NULL;
	spec.id = id;
	spec.cpu_milli = as->cpu_milli;
	spec.mem_bytes = as->mem_mib << 20;
	spec.pids_max = a->cfg.pids_max;
	/* The workload's own mount namespace holds no volume of another
	 * server (launch.h): their unmount on the node ends them at once. */
	snprintf(ws_root, sizeof(ws_root), "%s/workspaces", a->cfg.work_dir);
	spec.detach_under = ws_root;
	spec.keep = w->dir;
	if (ctr) {
		t0 = cnl_otel_now_ns();
		r = container_spec(a, w, as, envp, command, shim, &spec, bundle,
		                   sizeof(bundle), rt_argv, rt_root,
		                   sizeof(rt_root), sec.dir[0] ? sec.dir : NULL,
		                   err, sizeof(err));
		cnl_agent_trace_step("agent.container.create", t0, r, err);
		if (r < 0)
			goto fail;
	} else {
		argv[0] = "/bin/sh";
		argv[1] = "-c";
		argv[2] = command;
		argv[3] = NULL;
		spec.argv = argv;
		spec.env = envp;
		spec.cwd = w->dir;
		if ((r = bare_user(a, w, as, &spec, err, sizeof(err))) < 0)
			goto fail;
		spec.pid_ns = a->cfg.pid_ns;
		spec.mount_ns = a->cfg.mount_ns;
	}
	/* The state first: an agent restarted at any point after the launch
	 * finds it beside the cgroup and re-adopts the workload; one
	 * restarted before the launch finds no cgroup, and starts it if
	 * it is still assigned. */
	cnl_agent_state_save(a, w);
	{
		char po[700], pe[700];

		cnl_agent_out_path(a, id, "stdout", po, sizeof(po));
		cnl_agent_out_path(a, id, "stderr", pe, sizeof(pe));
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
			t0 = cnl_otel_now_ns();
			r = cnl_launch(a->launcher, &spec, &w->w, err,
			               sizeof(err));
			cnl_agent_trace_step(ctr ? "agent.container.start"
			                         : "agent.process.start",
			                     t0, r, err);
		}
		if (spec.stdout_fd >= 0)
			close(spec.stdout_fd);
		if (spec.stderr_fd >= 0)
			close(spec.stderr_fd);
		if (r < 0)
			goto fail;
	}
	cnl_agent_secrets_done(&sec);
	cnl_log(CNL_LOG_INFO, "workload started",
	        "id=%s epoch=%" PRId64 " kind=%s gpus=%s", id, w->epoch,
	        w->server ? "server" : "job", cvd[0] ? cvd : "-");
	/* Its "running" report goes from the supervise thread (first of
	 * what it sends of it), which the addition wakes. */
	w->running_unsent = true;
	cnl_agent_trace_launched(&launch, w, 0, NULL);
	pthread_mutex_lock(&a->mu);
	cnl_agent_wk_add(a, w);
	a->started_total++;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(a->starting); i++)
		if (a->starting[i] == w)
			a->starting[i] = NULL;
	pthread_mutex_unlock(&a->mu);
	return true;
fail:
	/* A bad assignment is reported failed with the reason; we go on. */
	{
		char q[1500];

		cnl_log(CNL_LOG_WARN, "cannot start workload", "id=%s err=%s",
		        id, cnl_log_quote(q, sizeof(q), err));
	}
	cnl_agent_trace_launched(&launch, w, r < 0 ? r : -1, err);
	cnl_agent_secrets_done(&sec);
	cnl_agent_secrets_drop(a, id);
	cnl_agent_state_drop(a, id);
	cnl_agent_bundle_drop(a, id);
	if (!w->server && w->dir[0])
		cnl_agent_rmtree(w->dir);
	if (w->server && w->dir[0])
		cnl_agent_workspace_close(a, w);
	cnl_agent_report(a, cl, w, CNL_WIRE_REPORT_FAILED, 127, NULL, err);
	pthread_mutex_lock(&a->mu);
	cnl_agent_mig_release(a, w->mig_uuid);
	pthread_mutex_unlock(&a->mu);
	return false;
}

/* The slot @w takes in a->starting (the assignment thread's: @slot), and
 * out of it with its free when its start failed. */
static void run_start(struct cnl_agent *a, struct cnl_client *cl, int slot,
                      const struct cnl_wire_assignment *as, struct wk *w)
{
	if (start(a, cl, as, w))
		return;
	pthread_mutex_lock(&a->mu);
	a->starting[slot] = NULL;
	pthread_mutex_unlock(&a->mu);
	cnl_agent_wk_free(w);
}

/* Whether a starter can start @as: a job of the host image without MIG
 * (images are fetched, MIG instances made and servers' volumes and
 * forwarders opened on the assignment thread, one at a time). */
static bool starter_kind(const struct cnl_wire_assignment *as)
{
	return as->kind != CNL_WIRE_SERVER && !as->image[0] &&
	       !as->gpu.mig_profile[0];
}

/* Whether @id is queued for a starter or being started.  Under the lock. */
static bool start_pending(const struct cnl_agent *a, const char *id)
{
	for (size_t i = 0; i < a->n_start_q; i++)
		if (strcmp(a->start_q[i]->id, id) == 0)
			return true;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(a->starting); i++)
		if (a->starting[i] && strcmp(a->starting[i]->id, id) == 0)
			return true;
	return false;
}

/* Drop the queued starts the list @list no longer asks for (moved,
 * cancelled, or to stop).  Under the lock. */
static void unqueue_unlisted(struct cnl_agent *a,
                             const struct cnl_wire_assignments *list)
{
	size_t keep = 0;

	for (size_t i = 0; i < a->n_start_q; i++) {
		const struct cnl_wire_assignment *q = a->start_q[i];
		bool listed = false;

		for (size_t k = 0; k < list->n && !listed; k++)
			listed = strcmp(list->items[k].id, q->id) == 0 &&
			         list->items[k].epoch == q->epoch &&
			         list->items[k].action == CNL_WIRE_RUN;
		if (listed)
			a->start_q[keep++] = a->start_q[i];
		else
			free(a->start_q[i]);
	}
	a->n_start_q = keep;
}

void cnl_agent_starters_wake(struct cnl_agent *a)
{
	pthread_mutex_lock(&a->mu);
	pthread_cond_broadcast(&a->start_cv);
	pthread_mutex_unlock(&a->mu);
}

void *cnl_agent_starter(void *arg)
{
	struct cnl_agent *a = arg;
	int slot = atomic_fetch_add(&a->starter_next, 1);
	struct cnl_client *cl = a->start_cl[slot];

	pthread_mutex_lock(&a->mu);
	while (!a->stop) {
		struct cnl_wire_assignment *as;
		struct wk *w;

		if (a->n_start_q == 0) {
			/* A second at most: cnl_agent_stop (a signal
			 * handler's) cannot signal the condition. */
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec++;
			pthread_cond_timedwait(&a->start_cv, &a->mu, &ts);
			continue;
		}
		as = a->start_q[0];
		memmove(a->start_q, a->start_q + 1,
		        --a->n_start_q * sizeof(*a->start_q));
		w = cnl_agent_wk_new(as->id, as->epoch);
		a->starting[slot] = w;
		pthread_mutex_unlock(&a->mu);
		run_start(a, cl, slot, as, w);
		free(as);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* ---- reconciling --------------------------------------------------------- */

/* Whether (@id, @epoch) ended here lately and cnlabd took its end.
 * Under the lock. */
static bool forgotten(const struct cnl_agent *a, const char *id, int64_t epoch)
{
	for (size_t k = 0; k < CNL_ARRAY_SIZE(a->forgot); k++)
		if (a->forgot[k].epoch == epoch &&
		    strcmp(a->forgot[k].id, id) == 0)
			return true;
	return false;
}

void cnl_agent_reconcile(struct cnl_agent *a,
                         const struct cnl_wire_assignments *list)
{
	int64_t now = cnl_time_now_ms();

	/* Work we run that is no longer assigned here: moved or ended. */
	pthread_mutex_lock(&a->mu);
	unqueue_unlisted(a, list);
	for (size_t i = 0; i < a->n_wk; i++) {
		struct wk *w = a->wk[i];
		bool listed = false;

		for (size_t k = 0; k < list->n; k++)
			if (strcmp(list->items[k].id, w->id) == 0 &&
			    list->items[k].epoch == w->epoch)
				listed = true;
		if (!listed && !w->gone && !w->stopping) {
			w->gone = true;
			cnl_workload_kill(w->w);
		}
	}
	pthread_mutex_unlock(&a->mu);
	for (size_t k = 0; k < list->n; k++) {
		const struct cnl_wire_assignment *as = &list->items[k];
		struct wk *w;

		pthread_mutex_lock(&a->mu);
		w = cnl_agent_wk_find(a, as->id);
		if (!w && (forgotten(a, as->id, as->epoch) ||
		           start_pending(a, as->id))) {
			pthread_mutex_unlock(&a->mu);
			continue;
		}
		if (w && w->epoch == as->epoch && as->action == CNL_WIRE_STOP &&
		    !w->stopping) {
			w->stopping = true;
			w->signal_ms = as->signal_ms ? as->signal_ms : now;
			w->kill_ms = as->kill_ms ? as->kill_ms : now + 30000;
			cnl_agent_wake(a);
		}
		pthread_mutex_unlock(&a->mu);
		/* Running: a resized slice gets its new limits. */
		if (w && as->action == CNL_WIRE_RUN)
			cnl_agent_resize_apply(a, as);
		if (w || as->action != CNL_WIRE_RUN)
			continue;
		/* Nothing new on a lease run out (cnlabd was unreachable, the
		 * heartbeat that renews it is still to come): the workload's
		 * watchdog would kill it at once.  A later poll starts it. */
		if (a->lease_ms > 0 && now - a->last_hb_ok_ms > a->lease_ms)
			continue;
		/* A start after pre-emption waits for the victims to go; the
		 * next poll (bounded wait) retries. */
		if (as->not_before_ms > now)
			continue;
		/* The common case goes to the starters, side by side; the
		 * rest starts here (agent-internal.h). */
		if (a->n_starters > 0 && starter_kind(as)) {
			struct cnl_wire_assignment *q = cnl_xmalloc(sizeof(*q));

			*q = *as;
			pthread_mutex_lock(&a->mu);
			if (a->n_start_q == a->cap_start_q) {
				a->cap_start_q =
				    a->cap_start_q ? 2 * a->cap_start_q : 16;
				a->start_q = cnl_xrealloc(
				    a->start_q,
				    a->cap_start_q * sizeof(*a->start_q));
			}
			a->start_q[a->n_start_q++] = q;
			pthread_cond_signal(&a->start_cv);
			pthread_mutex_unlock(&a->mu);
			continue;
		}
		w = cnl_agent_wk_new(as->id, as->epoch);
		pthread_mutex_lock(&a->mu);
		a->starting[CNL_AGENT_STARTERS_MAX] = w;
		pthread_mutex_unlock(&a->mu);
		run_start(a, a->main_cl, CNL_AGENT_STARTERS_MAX, as, w);
	}
}

/* ---- the supervise thread ------------------------------------------------ */

/* Free the disk blocks of the first @end bytes of @w's output file of
 * @stream: delivered, or dropped.  The workload writes on past them. */
static void punch(const struct cnl_agent *a, const struct wk *w,
                  const char *stream, int64_t end)
{
	char path[700];
	int fd;

	end &= ~(int64_t)4095;
	if (end <= 0)
		return;
	cnl_agent_out_path(a, w->id, stream, path, sizeof(path));
	if ((fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return;
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, end) <
	        0 &&
	    errno != EOPNOTSUPP)
		cnl_log(CNL_LOG_DEBUG, "cannot free delivered output",
		        "id=%s err=\"%s\"", w->id, strerror(errno));
	close(fd);
}

/* Read the next chunk of @w's @stream into @buf, from @off (what cnlabd
 * has acknowledged), unless one is still pending (@n > 0, from *@at).
 * When more than log_buffer_max bytes wait (cnlabd away), the oldest are
 * dropped, a pending chunk with them: the next chunk starts at *@at, past
 * @off, and the blocks before it are freed, so that the node's disk holds
 * no more than that.  Under the lock. */
static void drain(const struct cnl_agent *a, const struct wk *w,
                  const char *stream, int fd, char *buf, size_t *n, int64_t off,
                  int64_t *at)
{
	int64_t max = a->cfg.log_buffer_max, start = *n ? *at : off;
	struct stat st;
	ssize_t got;

	if (fd < 0)
		return;
	if (max > 0 && fstat(fd, &st) == 0 && st.st_size - start > max) {
		start = st.st_size - max;
		*n = 0;
		punch(a, w, stream, start);
	}
	if (*n)
		return;
	got = pread(fd, buf, LOG_CHUNK_MAX, start);
	if (got > 0) {
		*n = (size_t)got;
		*at = start;
	}
}

/* Whether output of @w is not acknowledged yet.  Under the lock. */
static bool output_pending(const struct wk *w)
{
	struct stat so, se;

	return w->out_n || w->err_n ||
	       (w->out_rd >= 0 && fstat(w->out_rd, &so) == 0 &&
	        so.st_size > w->out_off) ||
	       (w->err_rd >= 0 && fstat(w->err_rd, &se) == 0 &&
	        se.st_size > w->err_off);
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

/* Whether a notebook server @w has gone idle for its timeout: no GPU time
 * used and no connection since the last check.  Under the lock. */
static void check_idle(struct wk *w, int64_t now)
{
	struct cnl_region_handle h;
	struct cnl_region_stat st;
	uint64_t busy = 0;

	if (cnl_region_map(w->region, &h) == 0) {
		if (cnl_region_stat(h.r, &st) == 0)
			for (unsigned p = 0; p < st.nprocs; p++)
				busy += st.procs[p].busy_ns;
		cnl_region_unmap(&h);
	}
	if (busy != w->last_busy_ns || w->tunnels > 0 ||
	    has_connections(w->port))
		w->last_active_ms = now;
	w->last_busy_ns = busy;
	if (now - w->last_active_ms >= w->idle_timeout_ms && !w->stopping) {
		cnl_log(CNL_LOG_INFO, "server idle; stopping", "id=%s", w->id);
		w->idle_stopped = true;
		w->stopping = true;
		w->signal_ms = now;
		w->kill_ms = now + 10000;
	}
}

/* Output copied out of the table, to send without the lock. */
struct chunk {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	char *o, *e; /* one byte of room past on and en (send_log) */
	size_t on, en;
	int64_t oo, eo; /* their offsets in the streams */
	int64_t od, ed; /* bytes dropped before them */
};

/* Copy the pending chunk of each workload's streams; under the lock.  The
 * output of work moved away is dropped. */
static struct chunk *take_output(struct cnl_agent *a, size_t *ret_n)
{
	struct chunk *logs = cnl_xcalloc(a->n_wk + 1, sizeof(*logs));
	size_t n = 0;

	for (size_t i = 0; i < a->n_wk; i++) {
		struct wk *w = a->wk[i];

		if (!w->out_n && !w->err_n)
			continue;
		if (w->gone) {
			w->out_n = w->err_n = 0;
			continue;
		}
		memcpy(logs[n].id, w->id, sizeof(w->id));
		logs[n].epoch = w->epoch;
		logs[n].o = cnl_xmalloc(w->out_n + 1);
		memcpy(logs[n].o, w->out, w->out_n);
		logs[n].on = w->out_n;
		logs[n].oo = w->out_at;
		logs[n].od = w->out_at - w->out_off;
		logs[n].e = cnl_xmalloc(w->err_n + 1);
		memcpy(logs[n].e, w->err_buf, w->err_n);
		logs[n].en = w->err_n;
		logs[n].eo = w->err_at;
		logs[n].ed = w->err_at - w->err_off;
		n++;
	}
	*ret_n = n;
	return logs;
}

/* What cnlabd said (@st, @next) of the chunk at @off of a stream of @k:
 * acknowledged (stored, held already, or a gap: from @next on), refused
 * for good (fenced, bad: dropped, the work is not ours or the chunk will
 * never go), or not delivered (kept, sent again).  Takes the lock. */
static void chunk_done(struct cnl_agent *a, const struct chunk *k, bool is_err,
                       int64_t off, size_t len, long st, int64_t next)
{
	int64_t acked = off - (is_err ? k->ed : k->od);
	struct wk *w;

	pthread_mutex_lock(&a->mu);
	w = cnl_agent_wk_find(a, k->id);
	if (w && w->epoch == k->epoch) {
		int64_t *o = is_err ? &w->err_off : &w->out_off;
		size_t *n = is_err ? &w->err_n : &w->out_n;

		if (*o == acked && (st == 200 || st == 201 || st == 416)) {
			/* Delivered: its blocks go, a MiB at a time. */
			if (next >> 20 != *o >> 20)
				punch(a, w, is_err ? "stderr" : "stdout", next);
			*o = next;
			*n = 0;
			cnl_agent_state_save(a, w); /* the offsets */
		} else if (*o == acked && st >= 400 && st < 500) {
			cnl_log(CNL_LOG_WARN, "output refused; dropped",
			        "id=%s status=%ld bytes=%zu", w->id, st, len);
			*o = off + (int64_t)len;
			*n = 0;
			cnl_agent_state_save(a, w);
		}
	}
	pthread_mutex_unlock(&a->mu);
}

/* Send each chunk of @logs; after the first that does not get through,
 * the rest wait for the next round (cnlabd is unreachable).  Whether
 * there were chunks and all got through. */
static bool send_output(struct cnl_agent *a, struct chunk *logs, size_t n)
{
	bool offline = false;

	for (size_t i = 0; i < n; i++) {
		int64_t next;
		long st;

		if (logs[i].on && !offline) {
			st = cnl_agent_send_log(a, a->sup_cl, logs[i].id,
			                        logs[i].epoch, false,
			                        logs[i].oo, logs[i].od,
			                        logs[i].o, logs[i].on, &next);
			chunk_done(a, &logs[i], false, logs[i].oo, logs[i].on,
			           st, next);
			offline = st < 0 || st >= 500;
		}
		if (logs[i].en && !offline) {
			st = cnl_agent_send_log(a, a->sup_cl, logs[i].id,
			                        logs[i].epoch, true, logs[i].eo,
			                        logs[i].ed, logs[i].e,
			                        logs[i].en, &next);
			chunk_done(a, &logs[i], true, logs[i].eo, logs[i].en,
			           st, next);
			offline = st < 0 || st >= 500;
		}
		free(logs[i].o);
		free(logs[i].e);
	}
	free(logs);
	return n > 0 && !offline;
}

/* Record how @w ended (@ex), once.  Under the lock. */
static void note_end(struct wk *w, const struct cnl_exit *ex)
{
	int code = ex->exited && ex->signal ? 128 + ex->signal : ex->code;
	char msg[128] = "";

	if (w->fenced)
		snprintf(msg, sizeof(msg),
		         "stopped by the node agent: cnlabd unreachable for "
		         "longer than its outage grace");
	else if (ex->oom_killed)
		snprintf(msg, sizeof(msg),
		         "killed by the out-of-memory killer (memory limit)");
	else if (ex->signal)
		snprintf(msg, sizeof(msg), "killed by signal %d", ex->signal);
	if (w->server)
		w->end_state = w->stopping || w->idle_stopped
		                   ? CNL_WIRE_REPORT_STOPPED
		                   : CNL_WIRE_REPORT_FAILED;
	else
		w->end_state = code == 0 ? CNL_WIRE_REPORT_SUCCEEDED
		                         : CNL_WIRE_REPORT_FAILED;
	snprintf(w->end_msg, sizeof(w->end_msg), "%s", msg);
	/* The GPU memory audit killed a process of it: a failure, whatever
	 * the command made of it, with the audit's words (a server stopped
	 * on request stays stopped). */
	if (w->gpu_kill[0] && !w->fenced &&
	    w->end_state != CNL_WIRE_REPORT_STOPPED) {
		w->end_state = CNL_WIRE_REPORT_FAILED;
		snprintf(w->end_msg, sizeof(w->end_msg), "%s", w->gpu_kill);
	}
	w->end_code = code;
	w->ended = true;
	cnl_log(CNL_LOG_INFO, "workload ended", "id=%s state=%s code=%d", w->id,
	        cnl_wire_report_state_name(w->end_state), code);
	cnl_agent_trace_end(w, code);
}

/* Forget @w: its files, then its cgroup and exit record, then its state.
 * A cgroup left without a state file would refuse the next start of this
 * id here. */
static void forget(struct cnl_agent *a, struct wk *w)
{
	char po[700], id[sizeof(w->id)];

	/* A job's folder goes once its end and files are delivered; a
	 * server's workspace stays until the server is deleted, its volume
	 * unmounted meanwhile (before @w leaves the table, so that a start
	 * of the server here finds it unmounted).  (dir and server are set
	 * before @w is in the table, and never change.) */
	if (!w->server)
		cnl_agent_rmtree(w->dir);
	else
		cnl_agent_workspace_close(a, w);
	/* Its bundle and runtime state too, while @w is in the table: once
	 * it is out, the next epoch of the same id may start here (a server
	 * stopped and started again) and make a bundle of the same name,
	 * which a drop after the removal would take from under it. */
	cnl_agent_bundle_drop(a, w->id);
	cnl_agent_secrets_drop(a, w->id);
	pthread_mutex_lock(&a->mu);
	cnl_region_remove(w->region);
	cnl_agent_out_path(a, w->id, "stdout", po, sizeof(po));
	unlink(po);
	cnl_agent_out_path(a, w->id, "stderr", po, sizeof(po));
	unlink(po);
	memcpy(id, w->id, sizeof(id));
	if (!w->gone) {
		unsigned k = a->n_forgot++ % CNL_ARRAY_SIZE(a->forgot);

		memcpy(a->forgot[k].id, w->id, sizeof(a->forgot[k].id));
		a->forgot[k].epoch = w->epoch;
	}
	a->ended_total++;
	cnl_agent_wk_remove(a, w);
	cnl_agent_state_drop(a, id);
	pthread_mutex_unlock(&a->mu);
	if (!a->cfg.bare)
		cnl_agent_images_gc(a);
}

/* Remove the workspaces of deleted servers the heartbeat was told of;
 * never that of a workload in the table. */
static void drop_workspaces(struct cnl_agent *a)
{
	char(*drop)[CNL_WIRE_ID_MAX];
	size_t n;

	pthread_mutex_lock(&a->mu);
	drop = a->drop;
	n = a->n_drop;
	a->drop = NULL;
	a->n_drop = 0;
	pthread_mutex_unlock(&a->mu);
	for (size_t i = 0; i < n; i++) {
		bool running;

		pthread_mutex_lock(&a->mu);
		running = cnl_agent_wk_find(a, drop[i]) != NULL;
		pthread_mutex_unlock(&a->mu);
		if (!running)
			cnl_agent_workspace_delete(a, drop[i]);
	}
	free(drop);
}

/* Report @w running; a server with its node-local URL (the forwarder's
 * loopback port): cnlabd shows users its proxy's URL and keeps the token
 * from this.  Only this thread frees a workload: @w is safe to use
 * without the lock (its port and token never change). */
static void report_running(struct cnl_agent *a, const struct wk *w)
{
	char url[256];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/?token=%s", w->port,
	         w->token);
	cnl_agent_report(a, a->sup_cl, w, CNL_WIRE_REPORT_RUNNING, 0,
	                 w->server ? url : NULL, NULL);
}

/* The earliest of @*at and @t (0: none yet). */
static void sooner(int64_t *at, int64_t t)
{
	if (*at == 0 || t < *at)
		*at = t;
}

/* What the supervise thread waits on: the wake eventfd, the output
 * inotify, and the pidfd of each workload whose end is still to come. */
struct waitset {
	struct pollfd *fds;
	struct wk **of; /* of[i]: whose pidfd fds[i + 2] is */
	size_t n, cap;
};

static void waitset_add(struct waitset *ws, int fd, struct wk *w)
{
	if (ws->n + 2 >= ws->cap) {
		ws->cap = ws->cap ? 2 * ws->cap : 16;
		ws->fds = cnl_xrealloc(ws->fds, ws->cap * sizeof(*ws->fds));
		ws->of = cnl_xrealloc(ws->of, ws->cap * sizeof(*ws->of));
	}
	ws->fds[ws->n + 2] = (struct pollfd){.fd = fd, .events = POLLIN};
	ws->of[ws->n++] = w;
}

/* Watch @w's output files: each write to them wakes the thread. */
static void watch_output(struct cnl_agent *a, struct wk *w)
{
	char path[700];

	w->watched = true;
	cnl_agent_out_path(a, w->id, "stdout", path, sizeof(path));
	(void)inotify_add_watch(a->out_ifd, path, IN_MODIFY);
	cnl_agent_out_path(a, w->id, "stderr", path, sizeof(path));
	(void)inotify_add_watch(a->out_ifd, path, IN_MODIFY);
}

/* Empty the wake eventfd and the inotify queue (the scan that follows
 * looks at every workload). */
static void drain_wakes(const struct cnl_agent *a)
{
	char buf[4096] __attribute__((aligned(8)));

	while (read(a->wake_fd, buf, 8) > 0)
		;
	while (read(a->out_ifd, buf, sizeof(buf)) > 0)
		;
}

/*
 * The supervise thread waits for events, never a fixed time: a workload's
 * end (its supervisor's pidfd), output written (inotify on state/), a
 * change other threads make (the wake eventfd: a workload added or to
 * stop, a report it waits for, the agent stopping), or the next deadline
 * it keeps (a stop's grace signal and kill, an idle check, a report to
 * try again).  Only what has no event to wait on is looked at again on a
 * timer: a workload without a pidfd (adopted from a supervisor that is
 * gone), or whose supervisor ended with other processes of it still
 * running (bare, without a PID namespace), every 250 ms; and a second at
 * most between scans, a backstop.
 */
void *cnl_agent_supervise(void *arg)
{
	struct cnl_agent *a = arg;
	int64_t last_idle_check = 0;
	struct waitset ws = {0};
	bool again = false;

	while (!a->stop) {
		int64_t now = cnl_time_now_ms(), next = now + 1000, wake = 0;
		struct wk *done[64], *run[64];
		struct cnl_exit ex[64];
		size_t n_done = 0, n_logs, n_run = 0;
		struct chunk *logs;
		int timeout;

		ws.n = 0;
		pthread_mutex_lock(&a->mu);
		for (size_t i = 0; i < a->n_wk && n_done < 64; i++) {
			struct wk *w = a->wk[i];
			struct cnl_exit e = {0};
			int pfd;

			if (!w->watched)
				watch_output(a, w);
			if (w->running_unsent && (w->gone || n_run < 64)) {
				if (!w->gone)
					run[n_run++] = w;
				w->running_unsent = false;
			}
			/* Its end waits for its "running" (a next round). */
			if (w->running_unsent)
				continue;
			drain(a, w, "stdout", w->out_rd, w->out, &w->out_n,
			      w->out_off, &w->out_at);
			drain(a, w, "stderr", w->err_rd, w->err_buf, &w->err_n,
			      w->err_off, &w->err_at);
			if (w->stopping && !w->term_sent &&
			    now >= w->signal_ms) {
				cnl_workload_signal(w->w, SIGTERM);
				w->term_sent = true;
			}
			if (w->stopping && now >= w->kill_ms)
				cnl_workload_kill(w->w);
			if (w->stopping && !w->term_sent)
				sooner(&wake, w->signal_ms);
			else if (w->stopping && now < w->kill_ms)
				sooner(&wake, w->kill_ms);
			if (w->server && w->idle_timeout_ms > 0 &&
			    now - last_idle_check >= IDLE_CHECK_MS)
				check_idle(w, now);
			if (w->server && w->idle_timeout_ms > 0)
				sooner(&wake,
				       (now - last_idle_check >= IDLE_CHECK_MS
				            ? now
				            : last_idle_check) +
				           IDLE_CHECK_MS);
			if (w->ended) {
				if (now >= w->end_retry_ms) {
					ex[n_done] = e;
					done[n_done++] = w;
				} else {
					sooner(&wake, w->end_retry_ms);
				}
				continue;
			}
			if (!w->has_exit && cnl_workload_poll(w->w, &e) == 0 &&
			    e.exited) {
				w->exit_rec = e;
				w->has_exit = true;
			}
			pfd = cnl_workload_pidfd(w->w);
			if (!w->has_exit && pfd >= 0 && !w->sup_gone)
				waitset_add(&ws, pfd, w);
			else if (!w->has_exit)
				sooner(&wake, now + 250);
			/* Its end goes after the whole of its output (which
			 * cnlabd takes only while the work runs), however
			 * long cnlabd is away; moved work has none to send. */
			if (w->has_exit &&
			    (w->gone || (!output_pending(w) &&
			                 w->gpu_kills_unsent == 0))) {
				ex[n_done] = w->exit_rec;
				done[n_done++] = w;
			}
		}
		if (n_done == 64 || n_run == 64)
			again = true; /* more may be done: look again now */
		if (now - last_idle_check >= IDLE_CHECK_MS)
			last_idle_check = now;
		/* Send output outside the lock, on copies. */
		logs = take_output(a, &n_logs);
		pthread_mutex_unlock(&a->mu);
		/* Started: "running", before any output or end of it. */
		for (size_t i = 0; i < n_run; i++)
			report_running(a, run[i]);
		/* A chunk delivered: the rest of that stream may be there
		 * already, with no write to come that would wake us. */
		if (send_output(a, logs, n_logs))
			again = true;
		else if (n_logs)
			sooner(&wake, cnl_time_now_ms() + 1000);
		/* Ends: artifacts, checkpoint, report. */
		for (size_t i = 0; i < n_done; i++) {
			struct wk *w = done[i];

			/* Its secrets leave the node before its end is
			 * told: a user who sees the job done finds none of
			 * them left here.  (Still in the table: no next
			 * epoch of the id makes them anew meanwhile.) */
			cnl_agent_secrets_drop(a, w->id);
			if (!w->gone && !w->ended) {
				char why[sizeof(w->end_msg)];
				bool lost =
				    !w->server &&
				    cnl_agent_deliver_files(
				        a, a->sup_cl, w, why, sizeof(why)) < 0;

				pthread_mutex_lock(&a->mu);
				note_end(w, &ex[i]);
				if (lost)
					cnl_agent_files_failed(w, why);
				pthread_mutex_unlock(&a->mu);
			}
			if (!w->gone) {
				long st = cnl_agent_report(
				    a, a->sup_cl, w, w->end_state, w->end_code,
				    NULL, w->end_msg[0] ? w->end_msg : NULL);

				/* Taken (200), or no longer ours (404, 409):
				 * done.  Otherwise try again in a second. */
				if (st != 200 && st != 404 && st != 409) {
					w->end_retry_ms =
					    cnl_time_now_ms() + 1000;
					sooner(&wake, w->end_retry_ms);
					continue;
				}
			}
			forget(a, w);
		}
		drop_workspaces(a);
		if (again) {
			again = false;
			drain_wakes(a);
			continue;
		}
		/* Wait for the next event or deadline. */
		if (wake && wake < next)
			next = wake;
		now = cnl_time_now_ms();
		timeout = next > now ? (int)(next - now) : 0;
		if (!ws.fds) {
			ws.cap = 16;
			ws.fds = cnl_xcalloc(ws.cap, sizeof(*ws.fds));
			ws.of = cnl_xcalloc(ws.cap, sizeof(*ws.of));
		}
		ws.fds[0] = (struct pollfd){.fd = a->wake_fd, .events = POLLIN};
		ws.fds[1] = (struct pollfd){.fd = a->out_ifd, .events = POLLIN};
		if (poll(ws.fds, ws.n + 2, timeout) > 0) {
			pthread_mutex_lock(&a->mu);
			for (size_t i = 0; i < ws.n; i++)
				if (ws.fds[i + 2].revents)
					ws.of[i]->sup_gone = true;
			pthread_mutex_unlock(&a->mu);
		}
		drain_wakes(a);
	}
	free(ws.fds);
	free(ws.of);
	return NULL;
}
