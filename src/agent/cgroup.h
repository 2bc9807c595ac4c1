/*
 * cgroup.h - the agent's view of Linux control groups, v1 or v2, behind one
 * small interface that the launcher uses (cross-file, not public API).
 *
 * Detection (cnl_cg_open) reads /proc/self/mountinfo.  A cgroup2 mount whose
 * cgroup.controllers lists memory, cpu and pids wins: everything then lives
 * in one directory per workload.  Otherwise the v1 hierarchies are used, one
 * directory per distinct mount of the controllers memory, cpu, cpuacct, pids
 * and freezer (co-mounted controllers such as "cpu,cpuacct" share one).
 * memory and cpu are required; pids, cpuacct and freezer are optional (a
 * pids limit then fails with -EOPNOTSUPP, usage reads 0 CPU, kill works
 * without freezing).
 *
 * Layout: <mount>/cnlab/<agent>/<workload id> under each hierarchy.
 *
 * The file formats are parsed by pure functions (cnl_cg_parse_*,
 * cnl_cg_format_*) so that v2 formats are unit-tested even on a host that
 * only has v1 controllers.
 */
#ifndef CNL_AGENT_CGROUP_H
#define CNL_AGENT_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CNL_CG_PATH_MAX 512
#define CNL_CG_MAXDIRS  5
/* A file in a workload cgroup: directory + id + file name. */
#define CNL_CG_FILE_MAX (CNL_CG_PATH_MAX + 128)

/* Controllers the launcher cares about. */
enum cnl_cg_ctl {
	CNL_CG_MEMORY,
	CNL_CG_CPU,
	CNL_CG_CPUACCT,
	CNL_CG_PIDS,
	CNL_CG_FREEZER,
	CNL_CG_NCTL
};

/* One agent's cgroup roots. */
struct cnl_cg {
	int version; /* 1 or 2 */
	int ndirs;   /* distinct hierarchies used */
	/* dirs[i]: <mount>/cnlab/<agent> of hierarchy i */
	char dirs[CNL_CG_MAXDIRS][CNL_CG_PATH_MAX];
	int ctl_dir[CNL_CG_NCTL]; /* index into dirs, -1 if unavailable */
};

/* A line of /proc/self/mountinfo that mounts a cgroup hierarchy. */
struct cnl_cg_mount {
	int version;    /* 1 or 2 */
	char path[256]; /* mount point */
	char opts[256]; /* super options (v1: the controllers) */
	bool root;      /* mounts the hierarchy's root, not a subdirectory */
};

/*
 * cnl_cg_parse_mountinfo_line - parse one mountinfo line.  Returns 1 and
 * fills *ret for a cgroup or cgroup2 mount, 0 for other mounts,
 * -CNL_EPARSE for a malformed line.
 */
int cnl_cg_parse_mountinfo_line(const char *line, struct cnl_cg_mount *ret);

/*
 * cnl_cg_parse_keyed - find "key value" in flat-keyed text (cgroup.events,
 * memory.events, cpu.stat, memory.oom_control) and store the value.
 * -CNL_ENOTFOUND if the key is absent, -CNL_EPARSE if the value is no number.
 */
int cnl_cg_parse_keyed(const char *text, const char *key, int64_t *ret);

/*
 * cnl_cg_parse_int - a single-value file ("12345\n", or "max" which reads as
 * INT64_MAX).
 */
int cnl_cg_parse_int(const char *text, int64_t *ret);

/*
 * cnl_cg_format_cpu_max - v2 cpu.max for a limit in milli-CPUs with a
 * 100 ms period: "150000 100000", or "max 100000" for 0 (no limit).
 */
int cnl_cg_format_cpu_max(int64_t cpu_milli, char *buf, size_t n);

/* cnl_cg_has_controllers - a cgroup.controllers line lists all of names. */
bool cnl_cg_has_controllers(const char *line, const char *const *names);

/*
 * cnl_cg_open - detect the hierarchy from mountinfo_path (normally
 * /proc/self/mountinfo) and create <mount>/cnlab/<agent> in each hierarchy
 * (v2: enabling the memory, cpu and pids controllers down to it).
 * v2_only_at, if not NULL, forces v2 at that mount point even without
 * controllers (tests exercise the v2 code paths on the unified mount of a
 * hybrid host); limits then fail with -EOPNOTSUPP.
 */
int cnl_cg_open(struct cnl_cg *cg, const char *mountinfo_path,
                const char *agent, const char *v2_only_at, char *err,
                size_t errlen);

/* cnl_cg_remove_root - rmdir the agent directories (fails if non-empty). */
void cnl_cg_remove_root(const struct cnl_cg *cg);

/* cnl_cg_dir - the directory of workload id for ctl; -EOPNOTSUPP if none. */
int cnl_cg_dir(const struct cnl_cg *cg, enum cnl_cg_ctl ctl, const char *id,
               char *buf, size_t n);

/*
 * cnl_cg_procs_paths - the cgroup.procs file of workload id in every
 * hierarchy, for a child to join by writing "0" (no allocation after fork).
 * Returns the number of paths.
 */
int cnl_cg_procs_paths(const struct cnl_cg *cg, const char *id,
                       char paths[][CNL_CG_FILE_MAX]);

/* cnl_cg_create - mkdir the workload's cgroups (-EEXIST if present). */
int cnl_cg_create(const struct cnl_cg *cg, const char *id);

/* cnl_cg_exists - whether the workload's cgroup directory exists. */
bool cnl_cg_exists(const struct cnl_cg *cg, const char *id);

/* cnl_cg_remove - rmdir the workload's cgroups (-EBUSY while populated). */
int cnl_cg_remove(const struct cnl_cg *cg, const char *id);

/* cnl_cg_set_limits - write the CPU, memory and pids limits (0 = none). */
int cnl_cg_set_limits(const struct cnl_cg *cg, const char *id,
                      int64_t cpu_milli, int64_t mem_bytes, int64_t pids_max);

/*
 * cnl_cg_pids - the processes of the workload (union over hierarchies), up to
 * max into pids.  Returns the count; beyond max it is an upper bound (v1
 * hierarchies are not deduplicated past what pids holds), 0 means empty.
 */
int cnl_cg_pids(const struct cnl_cg *cg, const char *id, pid_t *pids, int max);

/* cnl_cg_signal - send sig to every process of the workload. */
int cnl_cg_signal(const struct cnl_cg *cg, const char *id, int sig);

/*
 * cnl_cg_kill - SIGKILL every process until the cgroup is empty: v2
 * cgroup.kill where present, else freeze (v1 freezer / v2 cgroup.freeze),
 * kill each listed process, thaw, repeat.  -ETIMEDOUT if it does not empty.
 */
int cnl_cg_kill(const struct cnl_cg *cg, const char *id);

/*
 * cnl_cg_oom_killed - 1 if the cgroup's OOM killer fired, 0 if not: v2
 * memory.events oom_kill, v1 memory.oom_control oom_kill (Linux 4.13+);
 * before 4.13, v1 falls back to under_oom, or a hit limit (memory.failcnt)
 * together with a SIGKILL death (sigkilled).
 */
int cnl_cg_oom_killed(const struct cnl_cg *cg, const char *id, bool sigkilled);

/* cnl_cg_usage - CPU time (usec), peak and current memory (bytes). */
int cnl_cg_usage(const struct cnl_cg *cg, const char *id, int64_t *cpu_usec,
                 int64_t *mem_peak, int64_t *mem_current);

/* cnl_cg_list - ids of workload cgroups under the agent root. */
int cnl_cg_list(const struct cnl_cg *cg, char ids[][64], int max);

/* cnl_cg_read_file, cnl_cg_write_file - whole small files. */
int cnl_cg_read_file(const char *path, char *buf, size_t n);
int cnl_cg_write_file(const char *path, const char *text);

#endif /* CNL_AGENT_CGROUP_H */
