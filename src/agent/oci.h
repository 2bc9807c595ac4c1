/*
 * oci.h - the OCI runtime-spec configuration (config.json) of one workload's
 * container, written by the agent and run by crun.
 *
 * What a workload's container is
 * ------------------------------
 * The agent never runs tenant code on the host: each workload is an OCI
 * bundle (a directory with config.json and the root filesystem) that crun
 * runs.  The configuration this module writes is the whole of the tenant's
 * view and privileges:
 *
 *   namespaces   user, mount, PID, IPC, UTS, cgroup, and network (a job alone
 *                gets only a loopback interface; gang members and, until
 *                the notebook proxy exists, servers share the host's)
 *   ids          container ids 0..id_count-1 map to the host range
 *                host_id_base.. (a range of the submitting user's own, never
 *                host uid 0); the command runs as container uid/gid
 *                CNL_OCI_TENANT_ID, not as the container's root
 *   privileges   no capability in any set, no_new_privs, a seccomp filter
 *                that refuses what a tenant never needs (kernel modules,
 *                kexec, mounts, new namespaces, keyrings, BPF, perf, ...)
 *   files        the root filesystem read-only; /workspace (the workload's
 *                folder), /tmp, /run and /dev/shm writable; /proc with the
 *                kernel's private files masked; the extra bind mounts the
 *                caller lists (the image's parts, the shim read-only, the
 *                slice's region); the GPU device nodes of the allocation
 *   environment  exactly the caller's list: nothing of the agent's own
 *
 * The cgroup is not crun's business: crun runs with --cgroup-manager=
 * disabled inside the cgroup the launcher (launch.h) created and limited,
 * so limits, kill, OOM, usage and adoption stay in one place.
 *
 * cnl_oci_config builds the document from a typed spec (pure: no I/O but
 * stat of device nodes); cnl_oci_write writes it as <bundle>/config.json,
 * 0600.
 */
#ifndef CNL_AGENT_OCI_H
#define CNL_AGENT_OCI_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* The container uid and gid the tenant's command runs as. */
#define CNL_OCI_TENANT_ID 1000u

/* Ids mapped into each container: 0..65535, like a subordinate range. */
#define CNL_OCI_ID_COUNT 65536u

struct cnl_oci_mount {
	const char *dest;    /* absolute path in the container */
	const char *source;  /* host path (bind) or a file system name */
	const char *type;    /* "bind", "tmpfs", ... */
	bool readonly;       /* bind: ro; others: as given in options */
	const char *options; /* extra comma-separated options, or NULL */
};

struct cnl_oci_spec {
	const char *const *argv; /* the command, argv[0] resolved in PATH */
	const char *const *env;  /* KEY=VALUE, NULL-ended: all it gets */
	const char *cwd;         /* absolute, in the container */
	const char *hostname;
	const char *rootfs;    /* the bundle's root, relative or absolute */
	unsigned host_id_base; /* first host id of the user's range (> 0) */
	bool host_network;     /* share the host's network namespace */
	const struct cnl_oci_mount *mounts; /* after the standard ones */
	size_t n_mounts;
	const char *const *devices; /* host device nodes, NULL-ended or NULL */
};

/*
 * cnl_oci_config - the config.json document of spec, in *ret (a new
 * reference).  -EINVAL with a reason in err for a bad spec (no command, a
 * relative cwd or mount destination, host_id_base 0 or a range that would
 * overflow, a device node that is not a character or block device).
 */
int cnl_oci_config(const struct cnl_oci_spec *spec, json_t **ret, char *err,
                   size_t errlen);

/* cnl_oci_write - cnl_oci_config written to <bundle>/config.json, 0600. */
int cnl_oci_write(const char *bundle, const struct cnl_oci_spec *spec,
                  char *err, size_t errlen);

#endif /* CNL_AGENT_OCI_H */
