/*
 * launch.h - the workload launcher of cnlab-agent: runs one command per
 * workload in its own cgroup with CPU, memory and pids limits, optionally in
 * its own PID and mount namespaces and as another user, streams its stdout
 * and stderr through pipes, kills it as a whole, reports its exit, OOM kill
 * and usage, and re-adopts it after an agent restart.
 *
 * Design
 * ------
 * Cgroups (cgroup.c): v2 where a cgroup2 mount offers memory, cpu and pids,
 * else the v1 controllers memory, cpu, cpuacct, pids and freezer.  Each
 * agent owns <mount>/cnlab/<agent-name>; each workload <...>/<id>.
 *
 * Process tree of one workload (all of it inside the workload's cgroup):
 *
 *   agent
 *    `- S0 supervisor    joins the cgroups, setsid, unshares the namespaces,
 *        |                keeps the lease (below)
 *        `- S1 init      only with pid_ns: pid 1 of the new PID namespace,
 *        |                mounts a fresh /proc when mount_ns is also set
 *        `- W command    (child of S1, or of S0 without pid_ns): pid 2 in
 *                         its namespace; drops to uid/gid, chdir, stdio,
 *                         execve
 *
 * S0 is either a fork of the agent that stays one (spec.supervisor NULL),
 * or, the agent's way (spec.supervisor = cnlab-init), a clone that shares
 * the agent's memory (CLONE_VM | CLONE_VFORK: no copy of the agent's page
 * tables, the launching thread waits) until, its cgroups joined and its
 * namespaces made, it becomes "cnlab-init --supervise" by execve and does
 * the rest (S1, W) as the small static program it then is.  So each
 * launch costs no copy of the agent and, while the work runs, no copy of
 * it lives on (the agent would pay a copy-on-write fault, and a TLB
 * shoot-down on every CPU it runs on, for each page it writes after each
 * fork); W is then a fork of cnlab-init, and the container runtime (or
 * the command) its one exec.
 *
 * The supervisor that is W's parent (S1, else S0) reaps every process that
 * reparents to it (it is pid 1, or a child subreaper), and when W ends it
 * writes "exited <code>" or "signaled <signo>" to <state_dir>/<id>.exit
 * (temp file + rename, so a reader sees all or nothing), then exits.  S0
 * waits for S1.  Supervisors block every signal, so a grace signal sent to
 * the whole cgroup reaches only the command.  With pid_ns the command's end
 * ends its namespace (the kernel kills the rest when S1 exits), like a
 * container; without pid_ns left-over daemons keep the workload running
 * until they end or it is killed.
 *
 * The lease watchdog is the supervisor that waits for the command: it
 * sleeps in sigtimedwait(SIGCHLD) until the command ends or the lease file
 * would be stale, so it costs no wake-up while the agent renews the lease;
 * when the lease has run out it kills the cgroup's processes (in a PID
 * namespace, kill(-1)) and records SIGKILL.  So work stops even when the
 * agent itself was killed, with one process between the agent and the
 * command (the container runtime's, in container mode).
 *
 * The exit record makes own and adopted workloads alike: cnl_workload_poll
 * reports an exit once the cgroup is empty, from the record.  A workload
 * without a record (its supervisor was SIGKILLed: cnl_workload_kill, OOM)
 * reports signal SIGKILL.  <state_dir>/<id>.pid holds S0's pid for adopt.
 *
 * Launch failures (command not found, bad cwd, bad id, id in use) are found
 * before anything is created.  Failures after the fork (setuid, chdir, exec)
 * come back over a close-on-exec pipe as "step + errno"; the launcher then
 * kills and removes the cgroup, so a failed launch leaves nothing behind.
 * Between fork and exec the children only make system calls (no
 * allocation): everything they need is prepared before the fork.
 *
 * OOM: v2 memory.events oom_kill > 0; v1 memory.oom_control oom_kill > 0
 * (under_oom on kernels before 4.13).
 *
 * Not thread-safe per object; different workloads may be used from
 * different threads.
 */
#ifndef CNL_AGENT_LAUNCH_H
#define CNL_AGENT_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cnl_launcher;
struct cnl_workload;

/* Longest workload id, without the terminating NUL. */
#define CNL_LAUNCH_ID_MAX 63

/*
 * cnl_launcher_new - one per agent.  name ([A-Za-z0-9_.-]+) names the
 * cgroup root cnlab/<name> created under each hierarchy; state_dir (created
 * if missing) holds the exit records.  On failure returns a negative code
 * and writes a reason into err (errlen bytes, may be 0).
 */
int cnl_launcher_new(const char *name, const char *state_dir,
                     struct cnl_launcher **ret, char *err, size_t errlen);

/*
 * cnl_launcher_new_v2_at - as cnl_launcher_new but forces cgroup v2 at
 * mount point v2_mount without resource controllers (limits then fail with
 * -EOPNOTSUPP).  For tests of the v2 paths (cgroup.kill, cgroup.events,
 * cgroup.freeze) on a hybrid host.
 */
int cnl_launcher_new_v2_at(const char *name, const char *state_dir,
                           const char *v2_mount, struct cnl_launcher **ret,
                           char *err, size_t errlen);

/*
 * cnl_launcher_free - free the launcher; running workloads are left alone
 * (the agent may restart and adopt them).  Removes the agent's cgroup root
 * only where it is empty.  NULL-safe.
 */
void cnl_launcher_free(struct cnl_launcher *l);

/* cnl_launcher_cgroup_version - 1 or 2. */
int cnl_launcher_cgroup_version(const struct cnl_launcher *l);

/*
 * cnl_launcher_cgroup_dir - the cgroup directory of workload id for a
 * controller ("memory", "cpu", "cpuacct", "pids", "freezer"); under v2 the
 * same directory for all.  -EOPNOTSUPP where that controller is absent.
 */
int cnl_launcher_cgroup_dir(const struct cnl_launcher *l,
                            const char *controller, const char *id, char *buf,
                            size_t n);

struct cnl_launch_spec {
	const char *id;           /* [A-Za-z0-9_.-]{1,63}; names its cgroup */
	const char *const *argv;  /* argv[0] resolved in the env's PATH */
	const char *const *env;   /* full environment KEY=VALUE, NULL-ended */
	const char *cwd;          /* working directory, must exist */
	int64_t cpu_milli;        /* 1000 = one core (CFS quota); 0 = none */
	int64_t mem_bytes;        /* memory limit, no swap; 0 = none */
	int64_t pids_max;         /* 0 = none */
	int uid, gid;             /* -1: keep the agent's */
	bool pid_ns;              /* own PID namespace under a tiny init */
	bool mount_ns;            /* own mount namespace, private propagation;
	                             with pid_ns also a fresh /proc */
	int stdout_fd, stderr_fd; /* -1: the launcher makes a pipe */
	/* cnlab-init's path: S0 is cloned sharing the agent's memory (no
	 * copy) and, once its namespaces are made, becomes
	 * "cnlab-init --supervise" by execve, which does what S0 and S1 do
	 * below; so no copy of the agent lives on beside the work.  NULL:
	 * S0 is a fork of the agent and supervises as that. */
	const char *supervisor;
	/* The lease: once lease_path is older than lease_ms (the agent that
	 * renews it is dead or cut off from cnlabd), the supervisor kills
	 * every process of the workload, says so on its stderr and records
	 * signal SIGKILL.  NULL or 0: no lease. */
	const char *lease_path;
	int64_t lease_ms;
	/* With mount_ns: a mount detached in the new namespace before the
	 * command runs (the cgroup2 mount of a hybrid host, which crun
	 * refuses to work beside).  NULL: none. */
	const char *hide_mount;
	/* With mount_ns: bind_src (recursively) onto bind_dst in the new
	 * namespace, so that the runtime reaches the workload's files by a
	 * path whose folders its user namespace may cross.  NULL: none. */
	const char *bind_src, *bind_dst;
	/* With mount_ns: every mount below the folder detach_under (not the
	 * folder itself) is detached in the new namespace, except keep and
	 * what is below it; before the bind.  The agent names the servers'
	 * workspaces: a volume another server mounted is not held by this
	 * workload's namespace, so that its unmount on the node ends it (and
	 * frees its loop device) at once.  NULL: none. */
	const char *detach_under, *keep;
	/* > 0: the program run is this open file (a sealed memfd copy of
	 * the runtime, cnl_launch_sealed_copy), executed through
	 * /proc/self/fd, not argv[0]'s path, which then only names it;
	 * 0: none (argv[0] is resolved as below). */
	int exe_fd;
};

/*
 * cnl_launch - start a workload.  argv[0] without '/' is searched in the
 * PATH of spec->env (default /usr/local/bin:/usr/bin:/bin); a relative path
 * with '/' is taken relative to cwd.  Errors (with a reason in err):
 * -CNL_ENOTFOUND command not found, -EINVAL bad id or arguments, -ENOENT /
 * -ENOTDIR bad cwd, -EEXIST a cgroup with that id exists, -CNL_ESIZE a
 * negative limit, -EOPNOTSUPP a limit the host cannot apply, or the errno of
 * the failed step in the child (setuid, chdir, exec...).  On failure no
 * cgroup, process or state file is left.
 */
int cnl_launch(struct cnl_launcher *l, const struct cnl_launch_spec *spec,
               struct cnl_workload **ret, char *err, size_t errlen);

/*
 * cnl_launch_sealed_copy - a copy of the executable @path in a memfd sealed
 * against every change (F_SEAL_SEAL | SHRINK | GROW | WRITE), opened
 * read-only and close-on-exec: set it as spec->exe_fd and every launch
 * runs that copy.  A process started from it cannot be altered through
 * /proc/PID/exe by anyone (a container's root included: the CVE-2019-5736
 * attack on the host's runtime binary), so a runtime that checks for it
 * (crun, runc) does not copy and re-execute itself for each container.
 * Only for ELF executables (a script would be run by its interpreter from
 * /proc/self/fd after the descriptor closed): -ENOEXEC otherwise.  The fd
 * or a negative errno; the copy is of the file as it is now (a runtime
 * upgraded on the node is taken at the agent's next start).
 */
int cnl_launch_sealed_copy(const char *path);

/* cnl_workload_stdout, _stderr - non-blocking read end of the pipe, or -1
 * (a caller-supplied fd, or an adopted workload).  Owned by the workload. */
int cnl_workload_stdout(const struct cnl_workload *w);
int cnl_workload_stderr(const struct cnl_workload *w);

/* cnl_workload_pid - the agent-side pid of the workload's supervisor (S0),
 * -1 if unknown. */
pid_t cnl_workload_pid(const struct cnl_workload *w);

/*
 * cnl_workload_pidfd - a pidfd of the workload's supervisor (S0): it polls
 * readable (POLLIN) once S0 has exited, which is when the command has
 * ended (then cnl_workload_poll says how, or that other processes of it
 * still run).  -1 where none could be had (an adopted workload whose S0 is
 * gone or unknown, a kernel before 5.3): poll.  Owned by the workload.
 */
int cnl_workload_pidfd(const struct cnl_workload *w);

/* cnl_workload_id - the workload id. */
const char *cnl_workload_id(const struct cnl_workload *w);

/*
 * cnl_workload_signal - send sig to every process in the workload's cgroup
 * (the supervisors block it, so only the command and its descendants act).
 */
int cnl_workload_signal(struct cnl_workload *w, int sig);

/*
 * cnl_workload_kill - SIGKILL the whole cgroup until it is empty (v2
 * cgroup.kill, else freeze, kill, thaw, repeat): no process survives,
 * double-forked daemons included.  -ETIMEDOUT if it would not empty.
 */
int cnl_workload_kill(struct cnl_workload *w);

/*
 * cnl_workload_procs - pids (agent's namespace) in the workload's cgroup, up
 * to max; returns how many there are (an upper bound when more than max;
 * 0 means none).
 */
int cnl_workload_procs(struct cnl_workload *w, pid_t *pids, int max);

struct cnl_exit {
	bool exited;     /* nothing of the workload runs any more */
	int code;        /* exit code of the command, -1 if signaled */
	int signal;      /* signal that ended the command, 0 if exited */
	bool oom_killed; /* the cgroup's OOM killer fired */
};

/*
 * cnl_workload_poll - non-blocking; ret->exited is false while any process
 * of the workload runs.  Reaps the supervisor when it is our child.
 */
int cnl_workload_poll(struct cnl_workload *w, struct cnl_exit *ret);

struct cnl_usage {
	int64_t cpu_usec;          /* CPU time of the cgroup, user + system */
	int64_t mem_peak_bytes;    /* highest memory charge seen */
	int64_t mem_current_bytes; /* memory charged now */
};

/* cnl_workload_usage - resource usage read from the cgroup. */
int cnl_workload_usage(struct cnl_workload *w, struct cnl_usage *ret);

/*
 * cnl_workload_free - close the pipes and free the handle.  If the workload
 * has exited, also remove its cgroup and state files, so its end is
 * forgotten: call it once that end has been dealt with (reported).  If it
 * still runs, leave it (it can be adopted again).  NULL-safe.
 */
void cnl_workload_free(struct cnl_workload *w);

/*
 * cnl_workload_release - close the pipes and free the handle, leaving the
 * workload exactly as it is: running or ended, its cgroup, exit record and
 * pid file stay for cnl_launcher_adopt.  For an agent that stops: the end
 * of a workload it has not reported yet belongs to the next agent, which
 * finds the workload only by its cgroup and exit record.  NULL-safe.
 */
void cnl_workload_release(struct cnl_workload *w);

/*
 * cnl_launcher_adopt - a handle on workload id after an agent restart.
 * Succeeds while its cgroup exists (running, or ended with its exit record
 * still readable through poll) or its exit record exists;
 * -CNL_ENOTFOUND when both are gone.  Adopted workloads have no pipes.
 */
int cnl_launcher_adopt(struct cnl_launcher *l, const char *id,
                       struct cnl_workload **ret);

/*
 * cnl_launcher_procs - pids (agent's namespace) in workload @id's cgroup,
 * up to @max, without a workload handle; how many there are (as
 * cnl_workload_procs), or a negative errno.
 */
int cnl_launcher_procs(struct cnl_launcher *l, const char *id, pid_t *pids,
                       int max);

/*
 * cnl_launcher_spawn_in - fork a process that joins workload @id's cgroup
 * (so its limits and its kill apply), takes @in, @out and @err as its
 * stdin, stdout and stderr, and executes @argv (argv[0] a path): the pid
 * for the caller to wait for, or a negative errno (-EINVAL: no such
 * workload cgroup).  Exit status 126: it could not join; 127: no exec.
 */
pid_t cnl_launcher_spawn_in(struct cnl_launcher *l, const char *id,
                            const char *const *argv, int in, int out, int err);

/*
 * cnl_launcher_list - ids of the workload cgroups present, up to max into
 * ids; returns how many there are.
 */
int cnl_launcher_list(struct cnl_launcher *l, char ids[][64], int max);

#endif /* CNL_AGENT_LAUNCH_H */
