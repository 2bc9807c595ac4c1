/*
 * node.h - the node protocol between cnlabd and cnlab-agent, typed: one
 * struct per message, one encoder (to a JSON object) and one strict
 * decoder (from one) each.
 *
 *   agent -> cnlabd   register      POST /v1/nodes
 *                     heartbeat     POST /v1/nodes/{id}/heartbeat
 *                     report        POST /v1/nodes/{id}/reports
 *                     log chunk     POST /v1/nodes/{id}/logs
 *                     GPU kill      POST /v1/nodes/{id}/gpu-kills
 *   cnlabd -> agent   node          the reply to register and heartbeat
 *                     assignments   GET /v1/nodes/{id}/assignments
 *                     files         GET /v1/nodes/{id}/checkpoints,
 *                                       /inputs (a job's files: path,
 *                                       size, SHA-256)
 *                     file          the reply to a file's upload
 *
 * Files themselves are not messages: they travel as raw bytes, streamed
 * (PUT /v1/nodes/{id}/artifacts?job=&epoch=&path= and /checkpoints, GET
 * /v1/nodes/{id}/inputs/file?job=&epoch=&path= and /checkpoints/file),
 * with their SHA-256 in the header X-Content-SHA256 both ways; the path
 * of a file, in the query, is one that cnl_wire_path_check() accepts.
 *
 * Strict.  A decoder refuses a body that is not an object, a field it
 * does not know, a field of the wrong type, a number out of its range, a
 * string too long for its field or outside its alphabet, or a required
 * field that is missing; it returns -CNL_EFIELD with @err naming the
 * field ("field \"epoch\": must be an integer in 0..9223372036854775807")
 * and leaves *@ret in a state that its _done() frees safely.  Every
 * encoder's output decodes back to an equal struct (the tests check each).
 *
 * Versions.  Register carries "protocol": CNL_WIRE_PROTOCOL; cnlabd
 * refuses another (an agent older or newer than it knows), so one side
 * never reads the other's messages by guesswork.
 *
 * Times travel as RFC 3339 strings and are milliseconds here (0: none).
 */
#ifndef CNL_WIRE_NODE_H
#define CNL_WIRE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/trace.h"

/* The node protocol's version: register carries it, cnlabd checks it and
 * takes agents from CNL_WIRE_PROTOCOL_MIN on. */
#define CNL_WIRE_PROTOCOL                                    \
	9 /* 5: node credentials (credential); log chunks    \
	   * carry their offset, acknowledged; 6: heartbeats \
	   * carry each slice's VRAM use (in-flight resize); \
	   * 7: and each GPU's utilisation and used memory;  \
	   * 8: assignments may carry "secrets", which the   \
	   * agent fetches (cnlabd sends older agents none); \
	   * 9: tunnels may carry "ssh" (cnlabd sends older  \
	   * agents none) */
/* The first protocol whose agents take ssh tunnels. */
#define CNL_WIRE_PROTOCOL_SSH 9
#define CNL_WIRE_PROTOCOL_MIN                        \
	5 /* an older agent holds no node credential \
	     and is refused on every node route */

#define CNL_WIRE_ID_MAX       64  /* ids: "node_01…", "job_01…" */
#define CNL_WIRE_CRED_MAX     128 /* a node credential "cnln_…" */
#define CNL_WIRE_NAME_MAX     64  /* node, user, GPU type, label names */
#define CNL_WIRE_UUID_MAX     97
#define CNL_WIRE_ADDRESS_MAX  128
#define CNL_WIRE_GPUS_MAX     16
#define CNL_WIRE_DATASETS_MAX 8
#define CNL_WIRE_GANG_MAX     64
#define CNL_WIRE_SECRETS_MAX  32 /* secrets of one workload */
#define CNL_WIRE_COMMAND_MAX  1024
#define CNL_WIRE_IMAGE_MAX    256
#define CNL_WIRE_URL_MAX      512
#define CNL_WIRE_MESSAGE_MAX  160
#define CNL_WIRE_LOG_MAX      (1024 * 1024) /* bytes of one log chunk */
#define CNL_WIRE_PATH_MAX     1024          /* a file's path, NUL included */
#define CNL_WIRE_LIST_MAX     4096          /* items of one list */

/* ---- register (agent -> cnlabd) ----------------------------------------- */

struct cnl_wire_device {
	int index;                    /* 0..CNL_WIRE_GPUS_MAX-1 */
	char uuid[CNL_WIRE_UUID_MAX]; /* "GPU-…" or "fake-…" */
	int64_t mem_mib;
	bool healthy;
};

struct cnl_wire_register {
	int protocol; /* CNL_WIRE_PROTOCOL */
	char name[CNL_WIRE_NAME_MAX];
	char gpu_type[CNL_WIRE_NAME_MAX]; /* "" without GPUs */
	int gpus;                         /* 0..CNL_WIRE_GPUS_MAX */
	int64_t cpu_milli, mem_mib;
	/* Labels, "" when not given. */
	char cluster[CNL_WIRE_NAME_MAX], zone[CNL_WIRE_NAME_MAX],
	    rack[CNL_WIRE_NAME_MAX];
	char address[CNL_WIRE_ADDRESS_MAX];
	bool has_datasets; /* a list was given (perhaps empty) */
	char datasets[CNL_WIRE_DATASETS_MAX][CNL_WIRE_NAME_MAX];
	int n_datasets;
	bool has_devices; /* a list was given: exactly one per GPU */
	struct cnl_wire_device devices[CNL_WIRE_GPUS_MAX];
	int n_devices;
};

json_t *cnl_wire_register_encode(const struct cnl_wire_register *m);
int cnl_wire_register_decode(const json_t *j, struct cnl_wire_register *ret,
                             char *err, size_t errlen);

/* ---- node: the reply to register and heartbeat -------------------------- */

struct cnl_wire_node {
	char id[CNL_WIRE_ID_MAX];
	char name[CNL_WIRE_NAME_MAX];
	int64_t epoch;
	char state[16]; /* "up", "cordoned", "draining", "lost" */
	int64_t lease_ms, heartbeat_ms;
	/* Heartbeat replies: the work the node runs that is not its to run
	 * (moved, or ended); malloc'd ids. */
	char (*stop)[CNL_WIRE_ID_MAX];
	size_t n_stop;
	bool has_stop;
	/* Heartbeat replies to an agent that sent "volumes": those of its
	 * workspaces whose server was deleted, to remove (volume image and
	 * folder); malloc'd ids. */
	char (*drop)[CNL_WIRE_ID_MAX];
	size_t n_drop;
	bool has_drop;
	/* Register replies to a join token: the node's own credential (its
	 * only copy; cnlabd keeps a digest).  "": none sent. */
	char credential[CNL_WIRE_CRED_MAX];
};

json_t *cnl_wire_node_encode(const struct cnl_wire_node *m);
int cnl_wire_node_decode(const json_t *j, struct cnl_wire_node *ret, char *err,
                         size_t errlen);
void cnl_wire_node_done(struct cnl_wire_node *m);

/* ---- credential (cnlabd -> agent, POST /v1/nodes/{node}/credential) ---- */

/* A rotated node credential; the one the request came with stays valid
 * until old_expires_ms (the overlap), then dies. */
struct cnl_wire_credential {
	char credential[CNL_WIRE_CRED_MAX];
	int64_t old_expires_ms;
};

json_t *cnl_wire_credential_encode(const struct cnl_wire_credential *m);
int cnl_wire_credential_decode(const json_t *j, struct cnl_wire_credential *ret,
                               char *err, size_t errlen);

/* ---- heartbeat (agent -> cnlabd) ---------------------------------------- */

struct cnl_wire_running {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	/* Protocol 6: the bytes of VRAM its slice holds now and its quota
	 * now (0: none), as its region counts them: what a pending shrink
	 * waits on.  has_*: sent (not for work without a GPU slice, nor by
	 * an older agent). */
	bool has_vram_used, has_vram_quota;
	int64_t vram_used, vram_quota;
	/* Protocol 7: the share of wall time its kernels ran on the GPU
	 * since the node's previous heartbeat, in percent of the whole GPU
	 * (the shim's ledger); has_util: sent (known). */
	bool has_util;
	int util_pct;
};

/* Protocol 7: one GPU's use now, as its driver reports it (-1: the
 * driver cannot tell; not sent). */
struct cnl_wire_gpu_use {
	int index;        /* 0..CNL_WIRE_GPUS_MAX-1 */
	int util_pct;     /* 0..100, or -1 */
	int64_t mem_used; /* bytes of device memory in use, or -1 */
};

struct cnl_wire_heartbeat {
	bool has_running; /* a list was sent: work missing from it is lost */
	struct cnl_wire_running *running; /* malloc'd */
	size_t n_running;
	/* The servers whose workspace the node keeps and runs nothing of
	 * now (protocol 3); cnlabd answers with those to drop.  malloc'd. */
	bool has_volumes;
	char (*volumes)[CNL_WIRE_ID_MAX];
	size_t n_volumes;
	/* Each GPU's use (protocol 7; an older agent sends none). */
	struct cnl_wire_gpu_use gpus[CNL_WIRE_GPUS_MAX];
	size_t n_gpus;
	/* The node's CPU (millicores) and memory (MiB) that work CNLab did
	 * not place holds ("others"): what cnlabd's Kubernetes scheduler
	 * sends for the pods of other schedulers; an agent sends none. */
	bool has_others;
	int64_t others_cpu_milli, others_mem_mib;
	/* With has_pods: how many workloads the node may hold at once
	 * ("pods_max": a Kubernetes node's allocatable pods, CNLab's and
	 * others' together) and how many of others' it holds ("others":
	 * {"pods"}). */
	bool has_pods;
	int64_t pods_max, others_pods;
};

json_t *cnl_wire_heartbeat_encode(const struct cnl_wire_heartbeat *m);
int cnl_wire_heartbeat_decode(const json_t *j, struct cnl_wire_heartbeat *ret,
                              char *err, size_t errlen);
void cnl_wire_heartbeat_done(struct cnl_wire_heartbeat *m);

/* ---- assignments (cnlabd -> agent) -------------------------------------- */

enum cnl_wire_kind { CNL_WIRE_JOB, CNL_WIRE_SERVER };
enum cnl_wire_action { CNL_WIRE_RUN, CNL_WIRE_STOP };

/* The cluster label of the nodes cnlabd's Kubernetes scheduler registers
 * (their work is pods: kube_sched.h). */
#define CNL_WIRE_KUBE_CLUSTER "kubernetes"

/* The slice: blocks of compute and VRAM on the GPUs of gpu_mask, in a MIG
 * instance when mig_profile is not "". */
struct cnl_wire_slice {
	int blocks; /* 0..100 per GPU, or 100 x GPUs for whole ones */
	int64_t vram_mib;
	uint32_t gpu_mask;
	char mig_profile[32]; /* "" unless MIG */
	int mig_start;        /* -1 unless MIG */
};

struct cnl_wire_gang {
	char id[CNL_WIRE_ID_MAX]; /* the leader's job id */
	int rank, size;
	char nodes[CNL_WIRE_GANG_MAX][CNL_WIRE_NAME_MAX]; /* by rank */
	int n_nodes;
};

struct cnl_wire_assignment {
	char id[CNL_WIRE_ID_MAX];
	enum cnl_wire_kind kind;
	int64_t epoch;
	enum cnl_wire_action action;
	char project_id[CNL_WIRE_ID_MAX], user_id[CNL_WIRE_ID_MAX];
	char user[CNL_WIRE_NAME_MAX]; /* the submitter's name; "" unknown */
	char shape[CNL_WIRE_NAME_MAX];
	char command[CNL_WIRE_COMMAND_MAX]; /* jobs */
	/* The image, by name and by its manifest's digest ("sha256:..."),
	 * which the agent fetches (GET /v1/nodes/{node}/blobs/{digest});
	 * "" and "": the built-in "host".  A name with no digest: the image
	 * was deleted since the submission. */
	char image[CNL_WIRE_IMAGE_MAX];
	char image_digest[72];
	int64_t image_bytes; /* its layers unpacked; 0: unknown */
	/* Servers. */
	char name[CNL_WIRE_NAME_MAX];
	int64_t storage_gb, idle_timeout_s;
	struct cnl_wire_slice gpu;
	bool has_gang;
	struct cnl_wire_gang gang;
	int64_t cpu_milli, mem_mib;
	int64_t not_before_ms;      /* start no earlier; 0: now */
	int64_t signal_ms, kill_ms; /* action stop: when; 0: none */
	/* The submission's W3C trace context, parent of the agent's spans
	 * (common/trace.h); "": none. */
	char traceparent[CNL_TRACE_HEADER_MAX];
	/* How many secrets the workload asked for: the node fetches them
	 * (POST /v1/nodes/{node}/secrets) before it starts; 0: none. */
	int32_t secrets;
};

struct cnl_wire_assignments {
	uint64_t version; /* the node's; poll again with since=version */
	int64_t epoch;    /* the node's */
	struct cnl_wire_assignment *items; /* malloc'd */
	size_t n;
};

json_t *cnl_wire_assignment_encode(const struct cnl_wire_assignment *m);
int cnl_wire_assignment_decode(const json_t *j, struct cnl_wire_assignment *ret,
                               char *err, size_t errlen);
json_t *cnl_wire_assignments_encode(const struct cnl_wire_assignments *m);
int cnl_wire_assignments_decode(const json_t *j,
                                struct cnl_wire_assignments *ret, char *err,
                                size_t errlen);
void cnl_wire_assignments_done(struct cnl_wire_assignments *m);

/* ---- report (agent -> cnlabd) ------------------------------------------- */

enum cnl_wire_report_state {
	CNL_WIRE_REPORT_RUNNING,
	CNL_WIRE_REPORT_SUCCEEDED,
	CNL_WIRE_REPORT_FAILED,
	CNL_WIRE_REPORT_STOPPED,
};

struct cnl_wire_report {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	enum cnl_wire_report_state state;
	bool has_exit_code;
	int exit_code;                      /* -255..255 */
	char url[CNL_WIRE_URL_MAX];         /* servers running; "" none */
	char message[CNL_WIRE_MESSAGE_MAX]; /* how it ended; "" none */
};

json_t *cnl_wire_report_encode(const struct cnl_wire_report *m);
int cnl_wire_report_decode(const json_t *j, struct cnl_wire_report *ret,
                           char *err, size_t errlen);
const char *cnl_wire_report_state_name(enum cnl_wire_report_state s);

/* ---- GPU memory audit kill (agent -> cnlabd) ----------------------------- */

/*
 * POST /v1/nodes/{id}/gpu-kills: the agent's GPU memory audit killed a
 * process of workload @id (epoch @epoch) whose slice held more device
 * memory than its quota, by the driver's own count (NVML).  cnlabd
 * checks that the work is the node's under that epoch (409 otherwise),
 * and appends one record to its audit chain with the workload's project
 * and user from its own books.  @used: what the whole slice held when it
 * was killed; @pid_used: what the killed process held of it.
 */
#define CNL_WIRE_PID_MAX 4194304 /* the kernel's pid_max limit */

struct cnl_wire_gpu_kill {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	int pid;          /* host pid, 1..CNL_WIRE_PID_MAX */
	int gpu;          /* the physical GPU, 0..CNL_WIRE_GPUS_MAX-1 */
	int64_t used;     /* bytes the slice held, >= 0 */
	int64_t pid_used; /* bytes the process held, 0..used */
	int64_t quota;    /* the slice's quota, bytes; 0: the workload
	                   * has no GPU */
};

json_t *cnl_wire_gpu_kill_encode(const struct cnl_wire_gpu_kill *m);
int cnl_wire_gpu_kill_decode(const json_t *j, struct cnl_wire_gpu_kill *ret,
                             char *err, size_t errlen);

/* ---- log chunk (agent -> cnlabd) ---------------------------------------- */

/*
 * Output, byte for byte.  Bytes that are valid UTF-8 without NUL travel
 * as the string "data"; any others (a chunk cut inside a character
 * included) as "data_base64", so nothing is replaced on the way.
 *
 * "offset" (protocol 5) is where the chunk's first byte lies in the
 * workload's stream (under that epoch).  cnlabd keeps each byte of a
 * stream once: a chunk it already holds (all of it) is acknowledged and
 * dropped, one that starts past what it holds (a gap) is refused with 416,
 * and each answer names the next offset it expects (struct
 * cnl_wire_log_ack), so an agent that lost a reply or a connection sends
 * again from there.  Without "offset" a chunk is appended as it comes.
 * "dropped" (with "offset"): the agent gave up that many bytes before the
 * chunk (its buffer on disk was full while cnlabd was away); cnlabd takes
 * the chunk if it holds the stream up to offset - dropped at least, and
 * notes in the log how many bytes it will never have.
 */
struct cnl_wire_log {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	bool stderr_; /* stream "stderr", else "stdout" */
	bool has_offset;
	int64_t offset;  /* >= 0, with has_offset */
	int64_t dropped; /* 0..offset, with has_offset */
	char *data;      /* malloc'd bytes, @len of them (NUL after them) */
	size_t len;      /* < CNL_WIRE_LOG_MAX */
};

json_t *cnl_wire_log_encode(const struct cnl_wire_log *m);
int cnl_wire_log_decode(const json_t *j, struct cnl_wire_log *ret, char *err,
                        size_t errlen);
void cnl_wire_log_done(struct cnl_wire_log *m);

/* cnlabd's answer to a log chunk (201 stored, 200 already held, 416 a
 * gap): "next", the offset of the stream it expects next; a reply without
 * it (a chunk without offset) decodes with has_next false. */
struct cnl_wire_log_ack {
	bool has_next;
	int64_t next;
};

json_t *cnl_wire_log_ack_encode(const struct cnl_wire_log_ack *m);
int cnl_wire_log_ack_decode(const json_t *j, struct cnl_wire_log_ack *ret,
                            char *err, size_t errlen);

/*
 * cnl_wire_bytes_set - set @key of @o to @n bytes of @data: "KEY" as a
 * string when they are UTF-8 without NUL, else "KEY_base64".  What log
 * chunks and the job logs cnlabd serves share.
 */
void cnl_wire_bytes_set(json_t *o, const char *key, const char *data, size_t n);

/* cnl_wire_utf8_ok - whether @n bytes of @s are valid UTF-8 (no overlong
 * forms, no surrogates) without NUL. */
bool cnl_wire_utf8_ok(const char *s, size_t n);

/* ---- files: what a job's files are, and a file upload's reply ------------
 */

/*
 * cnl_wire_path_check - whether @path may name a job's file: a relative
 * path of 1..CNL_WIRE_PATH_MAX-1 bytes of UTF-8, in components of at
 * most 255 bytes separated by '/', none empty, "." or "..", and no
 * control character (U+0000..U+001F, U+007F) anywhere.  Any other
 * character, spaces and non-ASCII included, is fine.  0, or -CNL_EFIELD
 * with @err saying what is wrong.
 */
int cnl_wire_path_check(const char *path, char *err, size_t errlen);

/* A job's file: an artifact, checkpoint or input. */
struct cnl_wire_file {
	char path[CNL_WIRE_PATH_MAX]; /* cnl_wire_path_check() */
	int64_t size;                 /* bytes */
	char sha256[65];              /* lower-case hex */
};

json_t *cnl_wire_file_encode(const struct cnl_wire_file *m);
int cnl_wire_file_decode(const json_t *j, struct cnl_wire_file *ret, char *err,
                         size_t errlen);

/* {"items": [{"path", "size", "sha256"}]} */
struct cnl_wire_files {
	struct cnl_wire_file *items; /* malloc'd */
	size_t n;
};

json_t *cnl_wire_files_encode(const struct cnl_wire_files *m);
int cnl_wire_files_decode(const json_t *j, struct cnl_wire_files *ret,
                          char *err, size_t errlen);
void cnl_wire_files_done(struct cnl_wire_files *m);

/*
 * Tunnels (GET /v1/nodes/{id}/tunnels, long-polled): the connections
 * cnlabd's notebook proxy wants this node to open, each to the port of one
 * of its servers:
 *   {"tunnels": [{"id": "tun_...", "workload": "srv_...",
 *                 "command": ["ls", "-l"]}]}
 * The agent opens each with POST /v1/nodes/{id}/tunnels/{tunnel} and
 * "Connection: Upgrade" ("Upgrade: cnlab-tunnel"), then relays bytes to
 * the server's port; or, with "command" (`cnlab server exec`), runs it in
 * the server's container and sends its output in exec frames:
 *   [kind: 1 byte][length: 4 bytes, big-endian][bytes]
 *   kind 1 stdout, 2 stderr, 3 the exit code (4 bytes, big-endian; 128+N
 *   for a signal N), the last frame.
 * Or, with "ssh": {"host_key": "-----BEGIN OPENSSH PRIVATE KEY-----...",
 * "authorized_keys": "ssh-ed25519 AAAA... ana@laptop\n..."} (protocol 9,
 * `cnlab server ssh`), starts an sshd in inetd mode in the server's
 * container with that host key and those keys, the tunnel its stdin and
 * stdout: the bytes are the SSH protocol's, end to end.
 */
#define CNL_WIRE_SSH_HOST_KEY_MAX 4096
#define CNL_WIRE_SSH_KEYS_MAX     (320 * 1024)
#define CNL_WIRE_TUNNELS_MAX      64
#define CNL_WIRE_EXEC_ARGS        64    /* arguments of a command */
#define CNL_WIRE_EXEC_BYTES       65536 /* their bytes, all together */
#define CNL_WIRE_EXEC_STDOUT      1
#define CNL_WIRE_EXEC_STDERR      2
#define CNL_WIRE_EXEC_EXIT        3

struct cnl_wire_tunnel {
	char id[CNL_WIRE_ID_MAX];
	char workload[CNL_WIRE_ID_MAX];
	char **argv; /* exec: malloc'd, NULL-ended; NULL: a port tunnel */
	size_t argc;
	/* ssh: malloc'd (both, or neither); NULL otherwise. */
	char *ssh_host_key, *ssh_keys;
};

struct cnl_wire_tunnels {
	struct cnl_wire_tunnel items[CNL_WIRE_TUNNELS_MAX];
	size_t n;
};

json_t *cnl_wire_tunnels_encode(const struct cnl_wire_tunnels *m);
int cnl_wire_tunnels_decode(const json_t *j, struct cnl_wire_tunnels *ret,
                            char *err, size_t errlen);
void cnl_wire_tunnels_done(struct cnl_wire_tunnels *m);
/* Check @a as an exec command: a non-empty array of at most
 * CNL_WIRE_EXEC_ARGS strings without NUL, CNL_WIRE_EXEC_BYTES together;
 * 0 or -CNL_EFIELD with @err naming the problem. */
int cnl_wire_exec_check(const json_t *a, char *err, size_t errlen);
/* An exec frame's head into @h: @kind, then @n (big-endian), the length of
 * the bytes that follow. */
void cnl_wire_exec_head(unsigned char h[5], int kind, uint32_t n);
/* The 4 bytes of an exit frame (kind CNL_WIRE_EXEC_EXIT) for @code. */
void cnl_wire_exec_code(unsigned char c[4], int code);

#endif /* CNL_WIRE_NODE_H */
