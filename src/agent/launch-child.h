/*
 * launch-child.h - the workload's supervisor, shared by the launcher
 * (launch.c, whose forked child S0 runs it) and cnlab-init's supervise
 * mode (init.c, which S0 becomes by execve when the launch names it, so
 * that no copy of the agent's memory lives on beside each workload: see
 * launch.h).  Everything here runs in a child between fork and execve or
 * in the small static cnlab-init: system calls only, no allocation.
 */
#ifndef CNL_AGENT_LAUNCH_CHILD_H
#define CNL_AGENT_LAUNCH_CHILD_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/cgroup.h"

/* The steps of the children that can fail, reported over the error pipe. */
enum cnl_child_step {
	CNL_STEP_JOIN,
	CNL_STEP_SETSID,
	CNL_STEP_UNSHARE,
	CNL_STEP_MOUNT_PRIVATE,
	CNL_STEP_HIDE_MOUNT,
	CNL_STEP_BIND,
	CNL_STEP_FORK,
	CNL_STEP_MOUNT_PROC,
	CNL_STEP_STDIO,
	CNL_STEP_SETGROUPS,
	CNL_STEP_SETGID,
	CNL_STEP_SETUID,
	CNL_STEP_CHDIR,
	CNL_STEP_EXEC,
	CNL_STEP_SUPERVISOR, /* S0's execve of cnlab-init --supervise */
};

struct cnl_child_err {
	int step;
	int err;
};

/* What the children use; filled before fork. */
struct cnl_child_ctx {
	char procs[CNL_CG_MAXDIRS][CNL_CG_FILE_MAX];
	int nprocs;
	const char *exe;
	const char *const *argv;
	const char *const *env;
	const char *cwd;
	const char *exit_path;
	char exit_tmp[CNL_CG_PATH_MAX + 80];
	int uid, gid;
	bool pid_ns, mount_ns;
	const char *lease_path;
	int64_t lease_ms;
	const char *hide_mount;
	const char *bind_src, *bind_dst;
	const char *detach_under, *keep;
	int out_fd, err_fd; /* child side */
	int errpipe;        /* write end, close-on-exec */
	/* S0 becomes this supervisor (cnlab-init --supervise ...) by
	 * execve once its namespaces are made; NULL: S0 supervises as the
	 * agent's fork. */
	const char *const *helper_argv;
	/* > 0: exe is /proc/self/fd/<exe_fd>, kept open across S0's execve
	 * of the supervisor (cnl_launch_spec.exe_fd). */
	int exe_fd;
};

/* Report @step and errno over @fd, exit 127. */
void cnl_child_fail(int fd, int step) __attribute__((noreturn));
/* Drop every inherited descriptor; stdin and stdout go to /dev/null,
 * stderr to the command's (for the lease's last word). */
void cnl_child_detach_fds(const struct cnl_child_ctx *c);
/* Fork the command, reap everything (as a child subreaper when
 * @subreaper), keep the lease, record the command's end, exit as it did. */
void cnl_child_supervise(const struct cnl_child_ctx *c, bool subreaper)
    __attribute__((noreturn));

/* The supervisors once S0's namespaces are made: with pid_ns, S1 (pid 1
 * of the new namespace, with a fresh /proc when mount_ns) supervises and
 * S0 waits for it; else S0 supervises as a child subreaper. */
void cnl_child_run(const struct cnl_child_ctx *c) __attribute__((noreturn));

#endif
