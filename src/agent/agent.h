/*
 * agent.h - cnlab-agent, the node daemon: turns the control plane's
 * assignments into running, isolated workloads on this node.
 *
 * Threads (one lock, struct cnl_agent.mu, guards the workload table):
 *   main        registers the node, then long-polls its assignments and
 *               reconciles: starts what is new (after fetching any
 *               checkpoint), signals what is to stop, kills what is gone;
 *   heartbeat   every heartbeat_ms reports the work it runs; kills what
 *               the control plane says was moved; and, once the lease
 *               (the larger of cnlabd's and outage_grace, 5 min by
 *               default) has passed without a successful heartbeat,
 *               kills everything, whose end it then reports, failed,
 *               when cnlabd answers again.  cnlabd moves a node's work
 *               only after the node was missing for its node timeout
 *               while cnlabd itself was up (a restart of cnlabd gives
 *               every node a full timeout), so an outage of the control
 *               plane shorter than the grace costs no work; a node cut
 *               off from a running cnlabd for longer than the node
 *               timeout may have its work started elsewhere, and learns
 *               of it (the heartbeat's "stop") when it is back;
 *   GPU audit   every gpu_audit_ms reads what each process holds on the
 *               GPUs (NVML) and kills the largest processes of a slice
 *               over its VRAM quota (gpu_audit.h);
 *   supervisor  streams stdout/stderr to cnlabd from the output files
 *               (the buffer on disk while cnlabd is unreachable), each
 *               chunk with its offset, until cnlabd acknowledges it; reports
 *               an end after all the output, applies kill deadlines,
 *               stops idle notebook servers, and on exit uploads
 *               artifacts and checkpoint files and reports the end.
 *
 * Workload layout under work_dir:
 *   jobs/<id>/artifacts, jobs/<id>/checkpoint   per job
 *   workspaces/<server id>                      per server, kept across
 *                                               stop and start
 *   regions/<id>.region                         the slice's shared region
 *                                               (VRAM quota, compute share)
 *   state/<id>.json                             what a restarted agent
 *                                               needs to re-adopt it
 *   state/<id>.stdout, .stderr                  its output (offsets
 *                                               delivered: in .json)
 *   bundles/<id>, crun/<id>                     a container's bundle and
 *                                               crun's state, for its
 *                                               life (in run_dir when
 *                                               set: a tmpfs)
 *   agent.lock                                  a POSIX record lock held
 *                                               by the running agent: a
 *                                               second one on this
 *                                               folder refuses to start
 *
 * An assignment (id, epoch) is started at most once here, across agent
 * restarts too: its state file is written before its launch, and a
 * workload stays in the table, and in its cgroup with its exit record
 * when the agent stops, until its end has been reported (or cnlabd moved
 * it).  A restarted agent re-adopts every workload it finds by cgroup and
 * state file, so the assignment poll never sees one of them as new.
 */
#ifndef CNL_AGENT_AGENT_H
#define CNL_AGENT_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cnl_agent_config {
	const char *server; /* cnlabd base URL */
	const char *token;  /* a join token or this node's credential; NULL:
	                     * the one stored in work_dir (credential.c) */
	int64_t rotate_s;   /* rotate the credential this often; 0: never */
	const char *cafile; /* NULL: system CAs */
	const char *name;   /* node name */
	const char *gpus;   /* provider spec (gpu.h) */
	int64_t cpu_milli;  /* offered to the scheduler */
	int64_t mem_mib;
	const char *work_dir;
	const char *shim;     /* libcnlab-cuda.so to preload; NULL/"": none */
	const char *shim_hip; /* libcnlab-hip.so, instead on AMD nodes */
	const char *address;  /* host at which servers are reached */
	const char *server_command; /* notebook command (sh -c), gets
	                             * $CNLAB_PORT and $CNLAB_WORKSPACE */
	const char *cluster, *zone, *rack;
	const char *datasets;  /* held here, comma-separated; NULL: none */
	bool bare;             /* no container (isolation = bare): for a
	                        * single-user laptop; never as root */
	const char *runtime;   /* the OCI runtime (crun), container mode */
	const char *run_dir;   /* bundles/ and crun/ (the runtime's state) go
	                        * here, a tmpfs; NULL or "": in work_dir */
	int64_t uid_base;      /* first host id of the users' id ranges */
	int64_t pids_max;      /* processes per workload; 0: no limit */
	int64_t image_keep_s;  /* unused unpacked images kept this long */
	const char *mounts;    /* node folders in every container:
	                        * HOST:DEST[:ro],... ; NULL: none */
	bool pid_ns, mount_ns; /* bare: isolate workloads in namespaces */
	int run_as_uid;        /* bare: -1: as the agent */
	bool map_users;        /* run as the local account named like the
	                        * submitting user (overrides run_as_uid) */
	const char *listen;    /* metrics address HOST:PORT; NULL: none */
	/* How long work goes on while cnlabd is unreachable (the lease the
	 * agent keeps is the larger of this and cnlabd's). */
	int64_t outage_grace_ms;
	/* The most bytes of one workload's stream kept on disk for cnlabd
	 * while it does not take them; the oldest beyond go (noted in the
	 * log).  0: no limit. */
	int64_t log_buffer_max;
	/* The GPU memory audit (gpu_audit.h): the NVML it reads, "nvml" or
	 * "nvml:/path/libnvidia-ml.so.1"; NULL or "auto": the gpus
	 * provider's when that is nvml, else none; "none": off.  Every
	 * gpu_audit_ms; 0: off. */
	const char *gpu_audit;
	int64_t gpu_audit_ms;
};

struct cnl_agent;

int cnl_agent_new(const struct cnl_agent_config *cfg, struct cnl_agent **ret,
                  char *err, size_t errlen);

/* cnl_agent_run - serve until cnl_agent_stop(); 0 or an error. */
int cnl_agent_run(struct cnl_agent *a);

/* cnl_agent_rotate - rotate the node credential after the next
 * heartbeat (signal-safe: sets a flag). */
void cnl_agent_rotate(struct cnl_agent *a);

/* cnl_agent_stop - ask run() to return (signal-safe: sets a flag). */
void cnl_agent_stop(struct cnl_agent *a);

/* cnl_agent_metrics_port - the bound metrics port, 0 if none. */
unsigned cnl_agent_metrics_port(const struct cnl_agent *a);

void cnl_agent_free(struct cnl_agent *a);

/*
 * cnl_agent_collect_main - `cnlab-agent collect`: a Kubernetes run pod's
 * collector of artifacts (collect.c).  The process's exit code.
 */
int cnl_agent_collect_main(int argc, char **argv);

#endif /* CNL_AGENT_AGENT_H */
