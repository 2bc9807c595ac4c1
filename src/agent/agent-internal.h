/*
 * agent-internal.h - what the files of the node agent's daemon share: the
 * agent (struct cnl_agent), its workload table (struct wk) and the
 * functions one file calls in another, under the prefix cnl_agent_.
 * agent.h is the daemon's API; this header never leaves src/agent.
 *
 * The daemon is split at its seams, one file each; a file calls only the
 * files below it (test build.no_cycles.cnlab-agent-core):
 *
 *   agent.c        life cycle: new, register, run (the assignment poll),
 *     │            stop, free, adoption of running work after a restart
 *     ├───────────────────────────────────────────► gpu_audit.c  the GPU
 *     │            memory audit thread (NVML usage against each slice's
 *     │            quota; kills, reports to cnlabd; then wk.c)
 *     ├──────────────────────────────┬──────────────────┐
 *     │                              │                  ▼
 *     │                              │    tunnel.c  cnlabd's proxy: the
 *     │                              │              tunnels to servers
 *     ▼                              ▼              (then wk.c, forward.c)
 *   supervisor.c   starting          metrics.c  /metrics and /healthz
 *     │            workloads,
 *     │            reconcile, the supervise thread, output draining
 *     ▼
 *   reporter.c     what goes to cnlabd: reports, log chunks, file uploads
 *     │            and downloads, heartbeats and the lease
 *     ▼
 *   resize.c       in-flight resize: new limits into a live region, the
 *     │            slice's use for the heartbeat
 *     ▼
 *   container.c    each workload's OCI bundle (oci.h: config.json), the
 *     │            users' host id ranges, the runtime check
 *     ▼
 *   wk.c           the workload table, the work directory's paths, and
 *                  each workload's local state file
 *
 *   credential.c   the node credential every client sends (any file may
 *                  call it; it calls none): kept, exchanged, rotated
 *   share.c        the compute share and board of a slice on the device
 *                  its processes see (share.h; pure, calls none)
 *
 * Every message to or from cnlabd goes through the typed node protocol of
 * wire/node.h: an encoder for what the agent sends, a strict decoder for
 * what it reads.  A reply that does not decode is logged with the field
 * the decoder names and handled like a failed call.
 *
 * Locking: struct cnl_agent.mu guards the table (a->wk, a->n_wk) and
 * every field of every struct wk; the fields of struct cnl_agent above
 * mu are set before the threads start and read-only after.  Functions
 * say when they expect the lock held.
 */
#ifndef CNL_AGENT_AGENT_INTERNAL_H
#define CNL_AGENT_AGENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "agent/forward.h"
#include "agent/gpu.h"
#include "agent/launch.h"
#include "net/client.h"
#include "net/http_server.h"
#include "sched/catalog.h"
#include "wire/node.h"

#define LOG_CHUNK_MAX (64 * 1024)
#define IDLE_CHECK_MS 5000
/* Starter threads (supervisor.c): two per core, at least 2, at most this;
 * a start waits on cnlabd (its file lists) and on the runtime about as
 * long as it computes. */
#define CNL_AGENT_STARTERS_MAX 8
/* Node folders the operator mounts into every container. */
#define CNL_AGENT_MOUNTS_MAX 8

/* A local workload, from the start of its assignment until its end has
 * been reported (or it was moved away). */
struct wk {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	bool server;
	struct cnl_workload *w;
	char dir[512];    /* working directory */
	char art[560];    /* artifacts dir (jobs) */
	char ckpt[560];   /* checkpoint dir (jobs) */
	char region[560]; /* region file */
	int gpu;          /* first GPU index, -1: none */
	/* Who and what it is, for /metrics' labels (metrics.c): the
	 * assignment's project id and user (name, else id), and its MIG
	 * instance's catalog profile and start slot ("", -1: none). */
	char project[CNL_WIRE_ID_MAX], user[CNL_WIRE_NAME_MAX];
	char mig_profile[32];
	int mig_start;
	/* metrics.c: the slice's GPU time at the previous scrape, when,
	 * and the SM use measured then. */
	uint64_t m_busy_ns;
	int64_t m_at_ns;
	double m_util;
	/* reporter.c: the same at the previous heartbeat (its own, so that
	 * scrapes do not shorten the heartbeat's interval); 0: none yet. */
	uint64_t hb_busy_ns;
	int64_t hb_at_ns;
	/* The slice size last written into the region by a resize
	 * (resize.c); 0: none yet. */
	int applied_blocks;
	int64_t applied_vram_mib;
	int board_slot; /* row on the GPU's board, -1: none */
	char mig_uuid[CNL_GPU_UUID_MAX];
	/* The slice's VRAM quota, bytes, as assigned: what the GPU memory
	 * audit holds it to (0 without a GPU; -1: none, whole GPUs). */
	int64_t vram_bytes;
	/* A shrink in flight (resize.c): the smaller quota, bytes, that
	 * vram_bytes becomes once the slice's use is within it (until then
	 * the audit holds the slice to the larger one: a shrink refuses new
	 * allocations, it does not kill); -1: none. */
	int64_t vram_shrink_to;
	/* The GPU memory audit killed a process of it: why, in words; its
	 * end is then a failure with this message.  "": no kill. */
	char gpu_kill[CNL_WIRE_MESSAGE_MAX];
	/* Its kill records cnlabd has not taken yet: its end waits for
	 * them (cnlabd takes a record only while the work is placed). */
	int gpu_kills_unsent;
	bool stopping;
	bool term_sent;
	int64_t signal_ms, kill_ms;
	int port;
	struct cnl_fwd *fwd; /* servers, container mode: the port's relay */
	int tunnels;         /* servers: proxy tunnels open (tunnel.c) */
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
	 * outlives an agent restart and cnlabd's outages: the files are the
	 * buffer on disk.  out_off/err_off: what cnlabd has acknowledged (it
	 * keeps each byte once); out/out_n, err_buf/err_n: the chunk read
	 * from there and not yet acknowledged, sent again until it is. */
	int out_rd, err_rd;
	int64_t out_off, err_off;
	/* Where the pending chunks start: past out_off/err_off when the
	 * bytes between were dropped (more than log_buffer_max waited). */
	int64_t out_at, err_at;
	/* Its exit, once seen; its end is reported after all its output
	 * is delivered. */
	bool has_exit;
	struct cnl_exit exit_rec;
	/* The supervise thread's: the output files are watched (inotify),
	 * the supervisor's pidfd has polled readable (it ended). */
	bool watched;
	bool sup_gone;
	/* Started: its "running" report is the supervise thread's to send
	 * (before any of its output or its end), so that the assignment
	 * thread goes on to the next start at once. */
	bool running_unsent;
	char token[33]; /* notebook servers: their access token */
	char image[65]; /* the manifest (hex) of its image; "": host */
	/* Ended, but cnlabd has not taken the report yet (unreachable):
	 * kept and reported again until it answers. */
	bool ended;
	enum cnl_wire_report_state end_state;
	int end_code;
	char end_msg[CNL_WIRE_MESSAGE_MAX];
	int64_t end_retry_ms;
	/* Its assignment's trace context ("": none) and when its process
	 * started (Unix ns; 0: no workload span to end), trace.c. */
	char trace[CNL_TRACE_HEADER_MAX];
	int64_t trace_start_ns;
};

struct cnl_agent {
	struct cnl_agent_config cfg;
	struct cnl_catalog cat;
	struct cnl_gpus *gpus;
	/* The GPU memory audit's own NVML handle (gpu_audit.c); NULL: no
	 * audit. */
	struct cnl_gpus *audit_gpus;
	struct cnl_launcher *launcher;
	/* One client per thread: main (register, poll, starts), heartbeat,
	 * supervisor. */
	struct cnl_client *main_cl, *hb_cl, *sup_cl, *tun_cl, *aud_cl;
	char node_id[CNL_WIRE_ID_MAX];
	/* The node credential (credential.c), under cred_mu: what every
	 * client sends; the join token of the environment, if any. */
	pthread_mutex_t cred_mu;
	char cred[CNL_WIRE_CRED_MAX], join[CNL_WIRE_CRED_MAX];
	atomic_bool rotate_now; /* SIGHUP: rotate after the next heartbeat */
	int64_t next_rotate_ms; /* the heartbeat thread's */
	/* lease_ms: cnlabd's lease, after which the workloads' watchdogs
	 * stop work whose agent died (the lease file not renewed);
	 * grace_ms: how long the agent, alive, renews the lease file with
	 * cnlabd unreachable before it stops all work: the larger of the
	 * lease and cfg.outage_grace_ms. */
	int64_t lease_ms, grace_ms, heartbeat_ms;
	int lock_fd;         /* work_dir/agent.lock, locked while we run */
	char lease[600];     /* touched after each good heartbeat */
	char runtime[512];   /* the OCI runtime's path (container mode) */
	char umoci[512];     /* umoci, which unpacks images (image.c) */
	char init[512];      /* cnlab-init, each container's process 1 */
	char notebook[512];  /* cnlab-notebook.py, "" if not installed */
	char mkfs[512];      /* mkfs.ext4, for volumes; "" if not found */
	char hide_mount[64]; /* detached in each container's namespace */
	/* A sealed copy of the runtime (cnl_launch_sealed_copy), the program
	 * every container's runtime runs from; 0: none, its path is run. */
	int runtime_fd;
	struct {
		char host[256], dest[256];
		bool ro;
	} mounts[CNL_AGENT_MOUNTS_MAX]; /* cfg.mounts, parsed */
	int n_mounts;
	pthread_mutex_t mu;
	struct wk **wk;
	size_t n_wk, cap_wk;
	/* Workspaces of deleted servers (the heartbeat's "drop"), for the
	 * supervise thread to remove. */
	char (*drop)[CNL_WIRE_ID_MAX];
	size_t n_drop;
	int64_t node_epoch; /* the heartbeat thread's */
	_Atomic int64_t last_hb_ok_ms;
	atomic_bool stop;
	/* The supervise thread waits on these and each workload's pidfd:
	 * wake_fd (an eventfd, cnl_agent_wake) for what other threads
	 * change, out_ifd (inotify) for output written to state/. */
	int wake_fd, out_ifd;
	/* The last workloads forgotten (id, epoch), under mu: an assignment
	 * list cnlabd made before it took one's end may still name it, and
	 * it must not start again (cnlabd would refuse its every call). */
	struct {
		char id[CNL_WIRE_ID_MAX];
		int64_t epoch;
	} forgot[64];
	unsigned n_forgot;
	/* Starts in flight (supervisor.c), under mu: the assignments queued
	 * for the starter threads (jobs of the host image without MIG, the
	 * common case; the rest starts on the assignment thread), and the
	 * workload each starter (slot CNL_AGENT_STARTERS_MAX: the
	 * assignment thread) is starting, not yet in the table: an id
	 * queued or starting is not queued again, and a board row taken by
	 * a start is not given to another.  start_cv wakes the starters. */
	struct cnl_wire_assignment **start_q;
	size_t n_start_q, cap_start_q;
	struct wk *starting[CNL_AGENT_STARTERS_MAX + 1];
	pthread_cond_t start_cv;
	int n_starters;          /* set before the threads start */
	atomic_int starter_next; /* each starter takes its slot from it */
	struct cnl_client *start_cl[CNL_AGENT_STARTERS_MAX];
	pthread_t start_thread[CNL_AGENT_STARTERS_MAX];
	pthread_t hb_thread, sup_thread, tun_thread, aud_thread;
	atomic_int tunnels_open; /* relays running (tunnel.c) */
	struct cnl_http_server *metrics;
	uint64_t version; /* the main thread's: assignments seen */
	uint64_t started_total, ended_total, fenced_total;
	/* Processes the GPU memory audit killed (gpu_audit.c). */
	_Atomic uint64_t audit_kills_total;
};

/* ---- credential.c: the node's identity ----------------------------------- */

/* The bearer for the clients' token_fn: the node credential now. */
void cnl_agent_token_fn(void *ud, char *buf, size_t len);
/* At start: the stored credential, or the environment's join token or
 * credential.  0, or an error with @err. */
int cnl_agent_cred_init(struct cnl_agent *a, char *err, size_t errlen);
/* The stored credential was refused: use the environment's join token
 * instead, if there is one not yet tried; true if so. */
bool cnl_agent_cred_rejoin(struct cnl_agent *a);
/* A credential cnlabd issued: stored, and used from now.  0 or -errno
 * (not stored; used anyway). */
int cnl_agent_cred_take(struct cnl_agent *a, const char *cred);
/* After a good heartbeat: rotate the credential if due (heartbeat
 * thread, its client @cl). */
void cnl_agent_cred_upkeep(struct cnl_agent *a, struct cnl_client *cl);

/* ---- wk.c: the workload table and local state --------------------------- */

/* The workload @id of the table, or NULL.  Under the lock. */
struct wk *cnl_agent_wk_find(struct cnl_agent *a, const char *id);
/* A new workload with nothing open: no GPU, no board row, no files. */
struct wk *cnl_agent_wk_new(const char *id, int64_t epoch);
/* Put @w in the table.  Under the lock. */
void cnl_agent_wk_add(struct cnl_agent *a, struct wk *w);
/* Take @w out of the table and free it, with its workload handle, its
 * output files and (when no other workload uses it) its MIG instance.
 * Under the lock. */
void cnl_agent_wk_remove(struct cnl_agent *a, struct wk *w);
/* Free @w, not in the table, closing its output files; its workload
 * handle is the caller's.  NULL is fine. */
void cnl_agent_wk_free(struct wk *w);
/* Destroy MIG instance @uuid unless a workload of the table still uses
 * it (a host instance serves several block slices).  Under the lock. */
void cnl_agent_mig_release(struct cnl_agent *a, const char *uuid);
/* Wake the supervise thread: a workload added, one to stop, a report it
 * waits for, a workspace to drop, the agent stopping.  Async-signal-safe,
 * no lock needed. */
void cnl_agent_wake(const struct cnl_agent *a);
/* state/<id>.stdout or .stderr */
void cnl_agent_out_path(const struct cnl_agent *a, const char *id,
                        const char *stream, char *buf, size_t len);
/* mkdir -p for the few levels the agent creates, each 0711 (passable,
 * not readable, by others). */
int cnl_agent_mkdirs(const char *path);
/* The workload's folder, its artifacts and checkpoint folders: 0700
 * whatever the umask (the parents by cnl_agent_mkdirs).  0 or -errno. */
int cnl_agent_wk_dirs(const struct wk *w);
/* rm -rf @path, following no link and crossing no mount. */
void cnl_agent_rmtree(const char *path);
/* chown -R @path to @uid/@gid, following no link.  0 or -errno (of the
 * top folder; what is below is done as far as it goes). */
int cnl_agent_chown_tree(const char *path, int uid, int gid);

/*
 * The state file, state/<id>.json: what a restarted agent needs to re-adopt
 * a workload.  Local to this node, not a protocol message; its fields are
 * those of struct wk of the same names: id, epoch, server, dir, art, ckpt,
 * region, port, idle_timeout_ms, gpu, out_off, err_off, and (optional)
 * vram_bytes, gpu_kill.
 */
void cnl_agent_state_save(const struct cnl_agent *a, const struct wk *w);
void cnl_agent_state_drop(const struct cnl_agent *a, const char *id);
/* Read state/<@id>.json into a new workload in *@ret_w (its output files
 * open at their offsets, no workload handle yet).  Returns 0, -ENOENT when
 * there is no such file, or -CNL_EFIELD/-CNL_EPARSE with @err naming the
 * field or place. */
int cnl_agent_state_load(const struct cnl_agent *a, const char *id,
                         struct wk **ret_w, char *err, size_t errlen);

/* ---- container.c: the workload's container ------------------------------ */

/* What one container is made of (the caller's strings, in the node's
 * terms; container.c turns them into a bundle). */
struct cnl_agent_ctr {
	const char *id;
	const char *user;           /* the submitter's name, "" if unknown */
	const char *command;        /* run as /bin/sh -c COMMAND */
	const char *const *env;     /* all the command gets, NULL-ended */
	const char *workspace;      /* the node folder mounted at /workspace */
	const char *shim;           /* preloaded through /etc/ld.so.preload */
	bool hip;                   /* shim is libcnlab-hip.so (AMD GPUs) */
	const char *region, *board; /* mounted at their node paths */
	const char *const *devices; /* GPU device nodes, NULL-ended */
	unsigned host_id_base;
	bool host_network;
	/* An image of the store: its unpacked root (the lower layer) and
	 * its environment; NULL: the built-in "host". */
	const char *image_root;
	char *const *image_env;
	/* The workload's secrets folder (secrets.c), mounted read-only at
	 * /run/secrets; NULL: none. */
	const char *secrets;
	/* A server's ssh folder (secrets.c), mounted read-only at
	 * CNL_AGENT_SSH_DIR; NULL: none. */
	const char *ssh;
};

/* secrets.c: a workload's secrets, fetched and written before it starts:
 * the folder to mount, and "VAR=value" for those asked for as
 * variables (malloc'd; cnl_agent_secrets_done() wipes and frees them). */
struct cnl_agent_secrets {
	char dir[600]; /* "" when it has none */
	char *env[CNL_WIRE_SECRETS_MAX];
	int n_env;
};
/* <work_dir>/secrets, or its folder of workload @id (NULL: the top). */
void cnl_agent_secrets_dir(const struct cnl_agent *a, const char *id, char *out,
                           size_t len);
/* Fetch @w's secrets through @cl and write them, @uid's, into its folder
 * on the secrets tmpfs: 0, or a negative errno with @why. */
int cnl_agent_secrets_fetch(struct cnl_agent *a, struct cnl_client *cl,
                            const struct wk *w, uid_t uid,
                            struct cnl_agent_secrets *ret, char *why,
                            size_t whylen);
void cnl_agent_secrets_done(struct cnl_agent_secrets *s);
/* A server's ssh folder on the same tmpfs, <work_dir>/secrets/<id>.ssh:
 * made empty (0500, @uid's) when the server's container is made, and
 * mounted read-only at CNL_AGENT_SSH_DIR in it; each `cnlab server ssh`
 * session writes its host key, authorized_keys and sshd_config there
 * (tunnel.c).  Removed with the secrets folder. */
#define CNL_AGENT_SSH_DIR "/run/cnlab/ssh"
/* The node's sshd, and where a container of an image sees the node's /usr
 * (when the image has no sshd of its own). */
#define CNL_AGENT_SSHD     "/usr/sbin/sshd"
#define CNL_AGENT_HOST_USR "/opt/cnlab/host-usr"
void cnl_agent_ssh_dir(const struct cnl_agent *a, const char *id, char *out,
                       size_t len);
int cnl_agent_ssh_prepare(struct cnl_agent *a, const char *id, uid_t uid,
                          char *out, size_t len);
/* Write @text as @dir/@name (0400, @uid's), replacing it whole. */
int cnl_agent_ssh_file(const char *dir, const char *name, const char *text,
                       uid_t uid);
/* Remove workload @id's secrets folder (and its ssh folder). */
void cnl_agent_secrets_drop(struct cnl_agent *a, const char *id);
/* Detach the secrets tmpfs from the node (agent exit). */
void cnl_agent_secrets_close(struct cnl_agent *a);

/* The device nodes of the GPUs of @mask and the driver's control nodes,
 * those the node has, up to @max; how many. */
int cnl_agent_gpu_nodes(uint32_t mask, char nodes[][40], int max);
/* The same for an AMD node: /dev/kfd and the render nodes (devs[].node)
 * of the GPUs of @mask. */
int cnl_agent_amd_nodes(const struct cnl_gpu_dev *devs, int ndev, uint32_t mask,
                        char nodes[][40], int max);
/* Write <work_dir>/cdi/cnlab.json, the CDI spec of this node's GPUs. */
int cnl_agent_cdi_write(struct cnl_agent *a, char *err, size_t errlen);
/* Where a container sees cnlab-notebook.py (container.c). */
#define CNL_AGENT_NOTEBOOK "/opt/cnlab/notebook.py"
/* Where each workload's mount namespace sees work_dir (container.c). */
#define CNL_AGENT_VIEW "/run/cnlab-agent"

/* @path under work_dir as the runtime sees it, under CNL_AGENT_VIEW (other
 * paths as they are). */
void cnl_agent_view(const struct cnl_agent *a, const char *path, char *out,
                    size_t n);
/* Where bundles/ and crun/ (the runtime's state) are: run_dir when set,
 * else work_dir. */
const char *cnl_agent_rundir(const struct cnl_agent *a);
/* Check the runtime (or, bare, that no work would run as root); detect a
 * hybrid cgroup host; check run_dir; create bundles/ and crun/.  At agent
 * start. */
int cnl_agent_container_init(struct cnl_agent *a, char *err, size_t errlen);
/* The first host id of the range of the user whose id is @user (its own,
 * allocated on first use). */
int cnl_agent_user_range(struct cnl_agent *a, const char *user,
                         unsigned *ret_base);
/* Write the bundle of @c (config.json, root file system) and its path
 * into @bundle; the runtime's old state for the id goes. */
int cnl_agent_bundle(struct cnl_agent *a, const struct cnl_agent_ctr *c,
                     char *bundle, size_t bundle_len, char *err, size_t errlen);
/* The words of @command, split at spaces into @buf (@buflen bytes) and
 * @words (at most @max), when it is plain words the shell would pass on
 * unchanged (letters, digits and _-./,:+@%=; no quotes, expansions,
 * redirections, operators; the first word neither an assignment nor one
 * of the shell's builtins): their count; 0 when it needs the shell. */
int cnl_agent_plain_argv(const char *command, char *buf, size_t buflen,
                         const char **words, int max);
/* Remove the bundle and the runtime's state of workload @id. */
void cnl_agent_bundle_drop(struct cnl_agent *a, const char *id);

/* ---- image.c: the node-local image store --------------------------------- */

/*
 * cnl_agent_image_get - image @name, manifest @digest ("sha256:..."), on
 * this node: fetched and unpacked unless it is already (refused when the
 * node lacks room for its @bytes unpacked, 0: unknown).  Its root's path
 * into @root, its environment (config.Env) into *@ret_env (malloc'd, one
 * block, NULL-ended; NULL when none).  0, or an error with @err saying
 * what (an empty @digest: the image was deleted).
 */
int cnl_agent_image_get(struct cnl_agent *a, const char *name,
                        const char *digest, int64_t bytes, char *root,
                        size_t len, char ***ret_env, char *err, size_t errlen);
/* Delete the unpacked images no workload runs, unused for image_keep_s,
 * and the blobs no remaining image names. */
void cnl_agent_images_gc(struct cnl_agent *a);
/*
 * Workspaces.  A server's workspace is workspaces/<id>; in a container,
 * with a size (storage_gb > 0), it is a volume of that size (volume.h):
 * the image volumes/<id>.img, mounted on the folder while the server runs
 * here.  Otherwise (a job, a server without a size, bare isolation) a
 * plain folder.
 */
/* Make (once) and mount the volume of server @w, of @gb GB (10^9 bytes);
 * nothing for @gb 0 or bare isolation.  A folder that holds files from
 * before volumes, without an image, is kept as it is (1, not hidden
 * under a new volume).  0, 1, or a negative errno with @err. */
int cnl_agent_workspace_open(struct cnl_agent *a, const struct wk *w,
                             int64_t gb, char *err, size_t errlen);
/* Unmount server @w's volume (it runs no more here); the image stays. */
void cnl_agent_workspace_close(struct cnl_agent *a, const struct wk *w);
/* Server ids of the workspaces this node keeps (folder or image) into
 * *@ret_ids (malloc'd); how many. */
size_t cnl_agent_workspaces_list(struct cnl_agent *a,
                                 char (**ret_ids)[CNL_WIRE_ID_MAX]);
/* Remove server @id's workspace: unmount, its folder, its image. */
void cnl_agent_workspace_delete(struct cnl_agent *a, const char *id);
/* At start, after adoption: unmount each volume of a server that no
 * workload of the table is (it ended while the agent was away).  Under
 * no lock; before the threads start. */
void cnl_agent_workspaces_sweep(struct cnl_agent *a);

/* ---- reporter.c: what goes to cnlabd ------------------------------------ */

/* Report @state for @w, with @url and @msg when not NULL; returns the
 * HTTP status (409: fenced) or a negative errno when none came. */
long cnl_agent_report(struct cnl_agent *a, struct cnl_client *cl,
                      const struct wk *w, enum cnl_wire_report_state state,
                      int code, const char *url, const char *msg);
/* Send @n bytes of @buf, which has room for one more, as the log chunk
 * at @offset of @stream (stderr when @is_stderr), byte for byte, after
 * @dropped bytes the agent gave up (0: none).  Returns
 * the HTTP status (201 stored, 200 held already, 416 a gap, 409 fenced)
 * or a negative errno when none came; *@ret_next: the offset cnlabd
 * expects next (@offset + @n when its reply does not say). */
long cnl_agent_send_log(struct cnl_agent *a, struct cnl_client *cl,
                        const char *id, int64_t epoch, bool is_stderr,
                        int64_t offset, int64_t dropped, char *buf, size_t n,
                        int64_t *ret_next);
/*
 * Upload every file under @dir, in subfolders too, as @what ("artifacts"
 * or "checkpoints"), each streamed with its SHA-256.  Nothing is followed:
 * each component is opened beneath its folder with openat2(RESOLVE_BENEATH
 * | RESOLVE_NO_SYMLINKS) (O_NOFOLLOW where the kernel lacks it), so a link
 * never leads out.  What cannot be collected (a symbolic link, a hard
 * link, a special file, a name that is not UTF-8, a read error, a file
 * cnlabd refuses, over a limit) is not skipped in silence: the rest is
 * still uploaded, and the call returns -CNL_EFIELD with @why naming the
 * first such file and the reason (the job then fails with it).  0 when
 * every file went.
 */
int cnl_agent_upload_dir(struct cnl_agent *a, struct cnl_client *cl,
                         const struct wk *w, const char *dir, const char *what,
                         char *why, size_t whylen);
/* The same, each file PUT to @route ("/v1/...?query", "&path=P" added),
 * @id the job's, for the log: the collector's (collect.c). */
int cnl_agent_upload_tree(struct cnl_client *cl, const char *dir,
                          const char *route, const char *what, const char *id,
                          char *why, size_t whylen);
/*
 * Write the job's files of @what ("checkpoints": a requeued job's latest
 * checkpoint; "inputs": the files it was submitted with) into @dest, in
 * their subfolders, streamed and checked against their SHA-256.  0, or a
 * negative errno with @why naming the file.
 */
int cnl_agent_fetch_files(struct cnl_agent *a, struct cnl_client *cl,
                          const struct wk *w, const char *what,
                          const char *dest, char *why, size_t whylen);
/* A job's end: upload its artifacts and its checkpoint (upload_dir for
 * each); 0, or -CNL_EFIELD with @why naming the first file that did not
 * go and why. */
int cnl_agent_deliver_files(struct cnl_agent *a, struct cnl_client *cl,
                            const struct wk *w, char *why, size_t whylen);
/* Make @w's recorded end a failure for @why (its files did not all go),
 * whatever its exit; under the lock. */
void cnl_agent_files_failed(struct wk *w, const char *why);
/* Renew the lease the workloads' watchdogs check. */
void cnl_agent_lease_touch(const struct cnl_agent *a);
/* The heartbeat thread (pthread start routine; @arg: the agent). */
void *cnl_agent_heartbeat(void *arg);

/* ---- resize.c: in-flight resize ------------------------------------------ */

/* Write the slice size of running @as into its region when it differs
 * from the one last applied (block slices of one GPU only).  Called
 * without the lock. */
void cnl_agent_resize_apply(struct cnl_agent *a,
                            const struct cnl_wire_assignment *as);
/* The VRAM quota and use of the slice whose region is @region into
 * @ret (has_vram_*; untouched when the region cannot be read), and the
 * GPU time its live processes' kernels ran, summed, into *@ret_busy_ns:
 * 0, or -1 when the region cannot be read.  Called without the lock. */
int cnl_agent_slice_usage(const char *region, struct cnl_wire_running *ret,
                          uint64_t *ret_busy_ns);

/* ---- supervisor.c: running the work ------------------------------------- */

/* Act on the assignments @as: start what is new, stop what is to stop,
 * kill what is no longer listed.  Called without the lock. */
void cnl_agent_reconcile(struct cnl_agent *a,
                         const struct cnl_wire_assignments *as);
/* The supervisor thread (pthread start routine; @arg: the agent). */
void *cnl_agent_supervise(void *arg);
/* A starter thread (pthread start routine; @arg: the agent): starts the
 * queued assignments, with its client a->start_cl[its slot]. */
void *cnl_agent_starter(void *arg);
/* Wake the starters (the agent stopping: they then return). */
void cnl_agent_starters_wake(struct cnl_agent *a);

/* ---- tunnel.c: cnlabd's proxy ------------------------------------------- */

/* The tunnel thread (pthread start routine; @arg: the agent): long-polls
 * the tunnels cnlabd's proxy wants and relays each to its server. */
void *cnl_agent_tunnels(void *arg);

/* ---- gpu_audit.c: the GPU memory audit ---------------------------------- */

/* The audit thread (pthread start routine; @arg: the agent), started
 * when a->audit_gpus is open; see gpu_audit.h. */
void *cnl_agent_gpu_audit(void *arg);

/* ---- metrics.c ---------------------------------------------------------- */

/* Serve /metrics and /healthz on cfg.listen (HOST:PORT), when set; a
 * failure is logged, and the agent runs without. */
void cnl_agent_metrics_listen(struct cnl_agent *a);

/* ---- trace.c: the launch's and the workload's spans ---- */
struct cnl_span;
/* Begin the launch span of @as (the thread's current context until
 * launched); keeps the assignment's context in @w. */
void cnl_agent_trace_begin(struct cnl_span *launch,
                           const struct cnl_wire_assignment *as, struct wk *w);
/* A step of the launch, from @start_ns to now; @r < 0: failed (@err). */
void cnl_agent_trace_step(const char *name, int64_t start_ns, int r,
                          const char *err);
/* End the launch span (@r < 0: it failed with @err); the workload's span
 * starts there. */
void cnl_agent_trace_launched(struct cnl_span *launch, struct wk *w, int r,
                              const char *err);
/* The workload's span, at its end (after note_end's record). */
void cnl_agent_trace_end(struct wk *w, int code);

#endif /* CNL_AGENT_AGENT_INTERNAL_H */
