/*
 * oci.c - a workload's config.json (see oci.h for what the container is).
 *
 * The standard part (namespaces, id maps, the seccomp filter, masked /proc
 * files, the standard mounts) is fixed here; the caller adds the command,
 * its environment, the image's and the workload's mounts and the devices.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/json.h"
#include "common/util.h"
#include "agent/oci.h"

/* Refused with EPERM: what a tenant's program never needs, and what would
 * widen its reach (kernel code, the clock, mounts, namespaces, keyrings,
 * BPF and perf, handles that bypass path checks, io_uring, whose requests
 * a filter cannot see and which has been a steady source of kernel
 * holes). */
static const char *const denied[] = {
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "iopl",
    "ioperm",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "adjtimex",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "vhangup",
};

/* clone() with any of these flags makes a namespace: refused. */
static const unsigned long ns_flags[] = {
    CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
};

static json_t *str_array(const char *const *v)
{
	json_t *a = json_array();

	for (; v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

static json_t *seccomp(void)
{
	json_t *calls = json_array();
	json_t *names = json_array();

	for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
		json_array_append_new(names, json_string(denied[i]));
	json_array_append_new(calls, json_pack("{s:o,s:s,s:i}", "names", names,
	                                       "action", "SCMP_ACT_ERRNO",
	                                       "errnoRet", EPERM));
	/* clone3 passes its flags in memory a filter cannot read: ENOSYS
	 * makes the C library fall back to clone(), which it can. */
	json_array_append_new(
	    calls, json_pack("{s:[s],s:s,s:i}", "names", "clone3", "action",
	                     "SCMP_ACT_ERRNO", "errnoRet", ENOSYS));
	for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
		json_array_append_new(
		    calls,
		    json_pack("{s:[s],s:s,s:i,s:[{s:i,s:I,s:I,s:s}]}", "names",
		              "clone", "action", "SCMP_ACT_ERRNO", "errnoRet",
		              EPERM, "args", "index", 0, "value",
		              (json_int_t)ns_flags[i], "valueTwo",
		              (json_int_t)ns_flags[i], "op",
		              "SCMP_CMP_MASKED_EQ"));
	return json_pack("{s:s,s:o}", "defaultAction", "SCMP_ACT_ALLOW",
	                 "syscalls", calls);
}

static void add_mount(json_t *mounts, const char *dest, const char *type,
                      const char *source, const char *opts)
{
	json_t *o = json_array();
	char buf[512];
	char *save = NULL;

	snprintf(buf, sizeof(buf), "%s", opts ? opts : "");
	for (char *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save))
		json_array_append_new(o, json_string(t));
	json_array_append_new(
	    mounts, json_pack("{s:s,s:s,s:s,s:o}", "destination", dest, "type",
	                      type, "source", source, "options", o));
}

static json_t *standard_mounts(bool host_network)
{
	json_t *m = json_array();

	add_mount(m, "/proc", "proc", "proc", "nosuid,noexec,nodev");
	add_mount(m, "/dev", "tmpfs", "tmpfs",
	          "nosuid,strictatime,mode=755,size=65536k");
	add_mount(m, "/dev/pts", "devpts", "devpts",
	          "nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5");
	add_mount(m, "/dev/shm", "tmpfs", "shm",
	          "nosuid,noexec,nodev,mode=1777,size=65536k");
	add_mount(m, "/dev/mqueue", "mqueue", "mqueue", "nosuid,noexec,nodev");
	/* A user namespace may mount sysfs only with its own network
	 * namespace; otherwise the host's, read-only. */
	if (host_network)
		add_mount(m, "/sys", "bind", "/sys",
		          "rbind,nosuid,noexec,nodev,ro");
	else
		add_mount(m, "/sys", "sysfs", "sysfs",
		          "nosuid,noexec,nodev,ro");
	add_mount(m, "/tmp", "tmpfs", "tmpfs", "nosuid,nodev,mode=1777");
	add_mount(m, "/run", "tmpfs", "tmpfs", "nosuid,nodev,mode=755");
	return m;
}

static int device(json_t *devs, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (stat(path, &st) < 0 ||
	    !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
		cnl_seterr(err, errlen, "device %s: not a device node", path);
		return -EINVAL;
	}
	json_array_append_new(
	    devs, json_pack("{s:s,s:s,s:I,s:I,s:i,s:i,s:i}", "path", path,
	                    "type", S_ISCHR(st.st_mode) ? "c" : "b", "major",
	                    (json_int_t)major(st.st_rdev), "minor",
	                    (json_int_t)minor(st.st_rdev), "fileMode", 0666,
	                    "uid", 0, "gid", 0));
	return 0;
}

int cnl_oci_config(const struct cnl_oci_spec *s, json_t **ret, char *err,
                   size_t errlen)
{
	static const char *const masked[] = {
	    "/proc/acpi",        "/proc/asound",        "/proc/kcore",
	    "/proc/keys",        "/proc/latency_stats", "/proc/timer_list",
	    "/proc/timer_stats", "/proc/sched_debug",   "/proc/scsi",
	    "/sys/firmware",     "/proc/kmsg",          NULL};
	static const char *const ro[] = {"/proc/bus",           "/proc/fs",
	                                 "/proc/irq",           "/proc/sys",
	                                 "/proc/sysrq-trigger", NULL};
	json_t *doc, *mounts, *ns, *devs, *linux_, *ids;

	if (!s || !s->argv || !s->argv[0] || !s->env || !s->rootfs) {
		cnl_seterr(err, errlen,
		           "the command, its environment and the "
		           "root file system are required");
		return -EINVAL;
	}
	if (!s->cwd || s->cwd[0] != '/') {
		cnl_seterr(err, errlen, "working directory must be absolute");
		return -EINVAL;
	}
	if (s->host_id_base == 0 ||
	    s->host_id_base > 0xffffffffu - CNL_OCI_ID_COUNT) {
		cnl_seterr(err, errlen,
		           "host id range %u+%u: never host root, below 2^32",
		           s->host_id_base, CNL_OCI_ID_COUNT);
		return -EINVAL;
	}
	for (size_t i = 0; i < s->n_mounts; i++)
		if (!s->mounts[i].dest || s->mounts[i].dest[0] != '/' ||
		    !s->mounts[i].source || !s->mounts[i].type) {
			cnl_seterr(err, errlen,
			           "mount %zu: an absolute destination, a "
			           "source and a type are required",
			           i);
			return -EINVAL;
		}

	mounts = standard_mounts(s->host_network);
	for (size_t i = 0; i < s->n_mounts; i++) {
		const struct cnl_oci_mount *m = &s->mounts[i];
		char opts[400];
		bool bind = strcmp(m->type, "bind") == 0;

		snprintf(opts, sizeof(opts), "%s%s%s%s",
		         bind ? "rbind,nosuid,nodev" : "",
		         bind && m->readonly ? ",ro" : "",
		         m->options && m->options[0] && bind ? "," : "",
		         m->options ? m->options : "");
		add_mount(mounts, m->dest, m->type, m->source, opts);
	}
	ns = json_pack("[{s:s},{s:s},{s:s},{s:s},{s:s},{s:s}]", "type", "pid",
	               "type", "ipc", "type", "uts", "type", "mount", "type",
	               "user", "type", "cgroup");
	if (!s->host_network)
		json_array_append_new(ns,
		                      json_pack("{s:s}", "type", "network"));
	devs = json_array();
	for (const char *const *d = s->devices; d && *d; d++)
		if (device(devs, *d, err, errlen) < 0) {
			json_decref(mounts);
			json_decref(ns);
			json_decref(devs);
			return -EINVAL;
		}
	ids = json_pack("[{s:i,s:I,s:I}]", "containerID", 0, "hostID",
	                (json_int_t)s->host_id_base, "size",
	                (json_int_t)CNL_OCI_ID_COUNT);
	linux_ = json_pack("{s:o,s:O,s:O,s:o,s:o,s:o,s:o}", "namespaces", ns,
	                   "uidMappings", ids, "gidMappings", ids, "devices",
	                   devs, "seccomp", seccomp(), "maskedPaths",
	                   str_array(masked), "readonlyPaths", str_array(ro));
	json_decref(ids);
	/* No rlimits: the container keeps the node's (the agent's). */
	doc = json_pack(
	    "{s:s,s:{s:b,s:{s:I,s:I,s:[I]},s:o,s:o,s:s,s:{s:[],s:[],s:[],"
	    "s:[],s:[]},s:b},s:{s:s,s:b},s:s,s:o,s:o}",
	    "ociVersion", "1.0.2", "process", "terminal", 0, "user", "uid",
	    (json_int_t)CNL_OCI_TENANT_ID, "gid", (json_int_t)CNL_OCI_TENANT_ID,
	    "additionalGids", (json_int_t)CNL_OCI_TENANT_ID, "args",
	    str_array(s->argv), "env", str_array(s->env), "cwd", s->cwd,
	    "capabilities", "bounding", "effective", "inheritable", "permitted",
	    "ambient", "noNewPrivileges", 1, "root", "path", s->rootfs,
	    "readonly", 1, "hostname", s->hostname ? s->hostname : "cnlab",
	    "mounts", mounts, "linux", linux_);
	if (!doc) {
		cnl_seterr(err, errlen, "cannot build config.json");
		return -ENOMEM;
	}
	*ret = doc;
	return 0;
}

int cnl_oci_write(const char *bundle, const struct cnl_oci_spec *spec,
                  char *err, size_t errlen)
{
	char path[4096];
	json_t *doc = NULL;
	int r = cnl_oci_config(spec, &doc, err, errlen);

	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "%s/config.json", bundle);
	r = cnl_json_write_file(doc, path, 0600, JSON_COMPACT);
	json_decref(doc);
	if (r < 0)
		cnl_seterr(err, errlen, "cannot write %s: %s", path,
		           strerror(-r));
	return r;
}
