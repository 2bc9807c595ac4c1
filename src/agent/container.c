/*
 * container.c - each workload in its OCI container: the runtime check at
 * start, the users' host id ranges, the bundle (config.json from oci.c and
 * a root file system), and its removal.
 *
 * The image
 * ---------
 * Until the node-local image store exists, every container runs the node's
 * own image, "host": a root file system of its own (per workload, under
 * bundles/<id>/rootfs, read-only once running) whose /usr is the node's
 * /usr bind-mounted read-only, with /bin, /lib, ... as the node has them
 * (links into /usr on a merged-/usr system), an /etc written here (passwd
 * and group naming the tenant, hosts, hostname; ld.so.preload when the
 * shim applies) plus a few of the node's read-only (the dynamic linker's
 * cache, certificates, time zone, alternatives).  Nothing else of the
 * node's file system is there: not /var, /home, /root, /srv, /opt, /tmp,
 * nor the agent's or cnlabd's directories.
 *
 * Ids
 * ---
 * Each submitting user gets a range of CNL_OCI_ID_COUNT host ids of its
 * own, uid_base + slot x CNL_OCI_ID_COUNT, slot 1, 2, ... by first use on
 * this node (slot 0: workloads that name no user), kept in
 * <work_dir>/users (one "slot user-id" line each: by id, so that a name
 * given to another user later does not inherit the range).  The tenant's
 * command runs as container uid CNL_OCI_TENANT_ID, host uid base + that; the
 * container's root is host uid base: never host root.
 *
 * Paths
 * -----
 * The runtime sets the container up from inside its user namespace, where
 * the node's root-owned 0700 folders (the all-in-one keeps the agent's
 * work folder inside cnlabd's data directory) cannot be crossed.  So the
 * launcher binds work_dir onto CNL_AGENT_VIEW in the workload's own mount
 * namespace, and the bundle and every mount source under work_dir are
 * named by that path; the folders below it are 0711 (crossable, not
 * listable), a workload's own folder its tenant's, 0700.
 *
 * Devices
 * -------
 * A workload gets the device nodes of its GPUs (/dev/nvidiaN by the GPU's
 * index) and the driver's control nodes, where the node has them (the
 * fake provider has none).  The same nodes are written at start as a CDI
 * spec, <work_dir>/cdi/cnlab.json (kind cnlab.io/gpu, one device per GPU
 * index plus "all"), so that other runtimes (Kubernetes through DRA, a
 * CDI-aware runtime) can give a container exactly what the agent gives.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "agent/oci.h"
#include "agent/volume.h"
#include "cnlab/errors.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "shim/region.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* The shims (CUDA; HIP on AMD nodes) and process 1, where the container
 * sees them. */
#define SHIM_IN_CONTAINER     "/opt/cnlab/libcnlab-cuda.so"
#define SHIM_HIP_IN_CONTAINER "/opt/cnlab/libcnlab-hip.so"
#define INIT_IN_CONTAINER     "/opt/cnlab/init"

/* The driver's nodes every GPU workload needs. */
static const char *const ctl_nodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                        "/dev/nvidia-uvm-tools"};

int cnl_agent_gpu_nodes(uint32_t mask, char nodes[][40], int max)
{
	int n = 0;

	if (!mask)
		return 0;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(ctl_nodes) && n < max; i++)
		if (access(ctl_nodes[i], F_OK) == 0)
			snprintf(nodes[n++], 40, "%s", ctl_nodes[i]);
	for (int i = 0; i < 32 && n < max; i++)
		if (mask >> i & 1) {
			snprintf(nodes[n], 40, "/dev/nvidia%d", i);
			if (access(nodes[n], F_OK) == 0)
				n++;
		}
	return n;
}

int cnl_agent_amd_nodes(const struct cnl_gpu_dev *devs, int ndev, uint32_t mask,
                        char nodes[][40], int max)
{
	int n = 0;

	if (!mask)
		return 0;
	/* The compute driver's node, which every HIP process opens. */
	if (access("/dev/kfd", F_OK) == 0 && n < max)
		snprintf(nodes[n++], 40, "/dev/kfd");
	for (int i = 0; i < ndev && i < 32 && n < max; i++)
		if (mask >> devs[i].index & 1 && devs[i].node[0] &&
		    access(devs[i].node, F_OK) == 0)
			snprintf(nodes[n++], 40, "%s", devs[i].node);
	return n;
}

/* The GPUs of a node, for its CDI spec: AMD ones are named by their
 * unique IDs in ROCR_VISIBLE_DEVICES and have /dev/kfd as control node. */
struct cdi_gpus {
	const struct cnl_gpu_dev *devs;
	int ndev;
	bool amd;
};

/* CDI containerEdits: of the nodes of @mask (cnl_agent_gpu_nodes, or
 * cnl_agent_amd_nodes), the control nodes when @controls, else the GPUs'
 * own; and, when not NULL, one environment variable. */
static json_t *cdi_edits(const struct cdi_gpus *g, uint32_t mask, bool controls,
                         const char *env)
{
	char nodes[40][40];
	int n = g->amd ? cnl_agent_amd_nodes(g->devs, g->ndev, mask, nodes, 40)
	               : cnl_agent_gpu_nodes(mask, nodes, 40);
	json_t *list = json_array(), *e;

	for (int i = 0; i < n; i++) {
		bool ctl = g->amd && strcmp(nodes[i], "/dev/kfd") == 0;

		for (size_t k = 0; k < CNL_ARRAY_SIZE(ctl_nodes); k++)
			ctl = ctl || strcmp(nodes[i], ctl_nodes[k]) == 0;
		if (ctl == controls)
			json_array_append_new(
			    list, json_pack("{s:s}", "path", nodes[i]));
	}
	e = json_pack("{s:o}", "deviceNodes", list);
	if (env)
		json_object_set_new(e, "env", json_pack("[s]", env));
	return e;
}

int cnl_agent_cdi_write(struct cnl_agent *a, char *err, size_t errlen)
{
	const struct cnl_gpu_dev *devs;
	int ndev = cnl_gpus_list(a->gpus, &devs);
	struct cdi_gpus g = {devs, ndev,
	                     strcmp(cnl_gpus_vendor(a->gpus), "amd") == 0};
	const char *var =
	    g.amd ? "ROCR_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
	json_t *spec, *list = json_array();
	char dir[600], path[700], env[2048], all[1800] = "";
	uint32_t every = 0;
	int r;

	for (int i = 0; i < ndev && i < 32; i++) {
		char name[16], one[CNL_GPU_UUID_MAX];
		size_t l = strlen(all);

		every |= 1u << devs[i].index;
		snprintf(name, sizeof(name), "%d", devs[i].index);
		if (g.amd)
			snprintf(one, sizeof(one), "%s", devs[i].uuid);
		else
			snprintf(one, sizeof(one), "%d", devs[i].index);
		snprintf(env, sizeof(env), "%s=%s", var, one);
		json_array_append_new(
		    list,
		    json_pack("{s:s,s:o}", "name", name, "containerEdits",
		              cdi_edits(&g, 1u << devs[i].index, false, env)));
		snprintf(all + l, sizeof(all) - l, "%s%s", l ? "," : "", one);
	}
	if (ndev > 0) {
		snprintf(env, sizeof(env), "%s=%s", var, all);
		json_array_append_new(
		    list,
		    json_pack("{s:s,s:o}", "name", "all", "containerEdits",
		              cdi_edits(&g, every, false, env)));
	}
	/* The control nodes, common to every device of the kind (none
	 * without a GPU: cnl_agent_gpu_nodes of an empty mask). */
	spec = json_pack("{s:s,s:s,s:o,s:o}", "cdiVersion", "0.6.0", "kind",
	                 "cnlab.io/gpu", "devices", list, "containerEdits",
	                 cdi_edits(&g, every, true, NULL));
	snprintf(dir, sizeof(dir), "%s/cdi", a->cfg.work_dir);
	snprintf(path, sizeof(path), "%s/cnlab.json", dir);
	if ((r = cnl_agent_mkdirs(dir)) == 0)
		r = cnl_json_write_file(spec, path, 0644, JSON_INDENT(2));
	json_decref(spec);
	if (r < 0)
		cnl_seterr(err, errlen, "cannot write the CDI spec %s: %s",
		           path, strerror(-r));
	return r;
}

/* Find @name in PATH (or take it as a path) into @out. */
static int find_binary(const char *name, char *out, size_t n)
{
	const char *path = getenv("PATH");

	if (strchr(name, '/')) {
		snprintf(out, n, "%s", name);
		return access(out, X_OK) == 0 ? 0 : -CNL_ENOTFOUND;
	}
	if (!path || !path[0])
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
		       "/sbin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");

		if (len) {
			snprintf(out, n, "%.*s/%s", (int)len, path, name);
			if (access(out, X_OK) == 0)
				return 0;
		}
		path += len;
		if (*path == ':')
			path++;
	}
	return -CNL_ENOTFOUND;
}

const char *cnl_agent_rundir(const struct cnl_agent *a)
{
	return a->cfg.run_dir && a->cfg.run_dir[0] ? a->cfg.run_dir
	                                           : a->cfg.work_dir;
}

void cnl_agent_view(const struct cnl_agent *a, const char *path, char *out,
                    size_t n)
{
	size_t len = strlen(a->cfg.work_dir);

	if (strncmp(path, a->cfg.work_dir, len) == 0 && path[len] == '/')
		snprintf(out, n, "%s%s", CNL_AGENT_VIEW, path + len);
	else
		snprintf(out, n, "%s", path);
}

/* The mounts setting: HOST:DEST[:ro|:rw], comma-separated; each HOST an
 * existing absolute folder, each DEST absolute, not / and not one of the
 * container's own places. */
static int parse_mounts(struct cnl_agent *a, char *err, size_t errlen)
{
	static const char *const own[] = {"/proc",      "/sys", "/dev",
	                                  "/workspace", "/etc", "/usr",
	                                  "/opt/cnlab"};
	const char *p = a->cfg.mounts;

	while (p && *p) {
		size_t len = strcspn(p, ",");
		char item[600], *dest, *mode;
		struct stat st;
		bool bad = len >= sizeof(item);

		snprintf(item, sizeof(item), "%.*s",
		         (int)(len < sizeof(item) ? len : 0), p);
		dest = strchr(item, ':');
		if (dest)
			*dest++ = '\0';
		mode = dest ? strchr(dest, ':') : NULL;
		if (mode)
			*mode++ = '\0';
		bad = bad || !dest || item[0] != '/' || dest[0] != '/' ||
		      !dest[1] || strstr(item, "..") || strstr(dest, "..") ||
		      strlen(item) >= sizeof(a->mounts[0].host) ||
		      strlen(dest) >= sizeof(a->mounts[0].dest) ||
		      (mode && strcmp(mode, "ro") != 0 &&
		       strcmp(mode, "rw") != 0) ||
		      a->n_mounts >= CNL_AGENT_MOUNTS_MAX;
		/* One spelling of each path: no //, /./, /../, nor a
		 * trailing / or /. that would slip past the checks below. */
		bad = bad ||
		      (dest && (strstr(dest, "//") || strstr(dest, "/./") ||
		                dest[strlen(dest) - 1] == '/' ||
		                (strlen(dest) >= 2 &&
		                 strcmp(dest + strlen(dest) - 2, "/.") == 0)));
		/* Not over, under or above one of the container's own
		 * places (/opt would hide /opt/cnlab). */
		for (size_t i = 0; !bad && i < CNL_ARRAY_SIZE(own); i++) {
			size_t l = strlen(own[i]), d = strlen(dest);
			bad =
			    (strncmp(dest, own[i], l) == 0 &&
			     (dest[l] == '\0' || dest[l] == '/')) ||
			    (strncmp(own[i], dest, d) == 0 && own[i][d] == '/');
		}
		if (bad) {
			cnl_seterr(
			    err, errlen,
			    "mounts: \"%.*s\" is not HOST:DEST[:ro|:rw] "
			    "(absolute paths written plainly, at most %d, "
			    "DEST not /, nor over, under or above /proc, "
			    "/sys, /dev, /etc, /usr, /workspace or "
			    "/opt/cnlab)",
			    (int)(len > 200 ? 200 : len), p,
			    CNL_AGENT_MOUNTS_MAX);
			return -EINVAL;
		}
		if (stat(item, &st) < 0 || !S_ISDIR(st.st_mode)) {
			cnl_seterr(err, errlen, "mounts: %s is not a folder",
			           item);
			return -ENOTDIR;
		}
		/* Both lengths were checked above. */
		memcpy(a->mounts[a->n_mounts].host, item, strlen(item) + 1);
		memcpy(a->mounts[a->n_mounts].dest, dest, strlen(dest) + 1);
		a->mounts[a->n_mounts++].ro = mode && strcmp(mode, "ro") == 0;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* cnlab-init: beside this binary (a build tree, or an install's bin),
 * else in /usr/lib/cnlab. */
static int find_beside(const char *name, int mode, char *out, size_t n)
{
	char self[512];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (len > 0) {
		self[len] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(out, n, "%.400s/%s", self, name);
			if (access(out, mode) == 0)
				return 0;
		}
	}
	snprintf(out, n, "/usr/lib/cnlab/%s", name);
	return access(out, mode) == 0 ? 0 : -CNL_ENOTFOUND;
}

/*
 * run_dir: bundles/ and crun/ go there (a tmpfs: each container's bundle
 * and the runtime's state are made and deleted for every workload).  It
 * is made (0711) when missing; it must be a folder of the agent's (root)
 * that no one else may write, not a link, and every folder above it must
 * be searchable by all: the runtime reaches the bundle from inside the
 * container's user namespace, as the container's root (a host id range),
 * not through the view of work_dir.  Not on a tmpfs: a warning, since it
 * then only moves the files.
 */
static int check_run_dir(const char *dir, char *err, size_t errlen)
{
	char p[700], *slash;
	struct stat st;
	struct statfs sf;

	if (dir[0] != '/' || strlen(dir) >= 500 || strpbrk(dir, ",:")) {
		cnl_seterr(err, errlen,
		           "run_dir %s: want an absolute path of at most 500 "
		           "bytes, without ',' or ':'",
		           dir);
		return -EINVAL;
	}
	/* Each workload's mount namespace binds work_dir over the view:
	 * a run_dir there would be hidden from the runtime. */
	if (strncmp(dir, CNL_AGENT_VIEW, strlen(CNL_AGENT_VIEW)) == 0 &&
	    (dir[strlen(CNL_AGENT_VIEW)] == '\0' ||
	     dir[strlen(CNL_AGENT_VIEW)] == '/')) {
		cnl_seterr(err, errlen,
		           "run_dir %s: not %s or below it (each workload "
		           "sees work_dir there); e.g. /run/cnlab-run",
		           dir, CNL_AGENT_VIEW);
		return -EINVAL;
	}
	if (mkdir(dir, 0711) < 0 && errno != EEXIST) {
		cnl_seterr(err, errlen, "run_dir %s: %s", dir, strerror(errno));
		return -errno;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 022)) {
		cnl_seterr(err, errlen,
		           "run_dir %s: must be a folder (not a link) owned by "
		           "the agent's user that no one else may write",
		           dir);
		return -EPERM;
	}
	snprintf(p, sizeof(p), "%s", dir);
	for (;;) {
		if (stat(p, &st) < 0 || !(st.st_mode & S_IXOTH)) {
			cnl_seterr(err, errlen,
			           "run_dir %s: %s must be searchable by all "
			           "(o+x): the runtime crosses it as the "
			           "container's root",
			           dir, p);
			return -EPERM;
		}
		if (strcmp(p, "/") == 0)
			break;
		slash = strrchr(p, '/');
		slash[slash == p ? 1 : 0] = '\0';
	}
	if (statfs(dir, &sf) == 0 && sf.f_type != TMPFS_MAGIC)
		cnl_log(CNL_LOG_WARN,
		        "run_dir is not on a tmpfs: bundles and the runtime's "
		        "state stay on a disk",
		        "run_dir=%s", dir);
	return 0;
}

int cnl_agent_container_init(struct cnl_agent *a, char *err, size_t errlen)
{
	struct statfs sf;
	char path[600];
	int r;

	/* The tokened notebook fallback (notebook.py), servers' too. */
	if (find_beside("cnlab-notebook.py", R_OK, a->notebook,
	                sizeof(a->notebook)) < 0)
		a->notebook[0] = '\0';
	/* Each workload's supervisor (launch.h), where it is found; bare
	 * work without it is supervised by a fork of the agent. */
	if (a->cfg.bare &&
	    find_beside("cnlab-init", X_OK, a->init, sizeof(a->init)) < 0)
		a->init[0] = '\0';
	if (a->cfg.bare) {
		/* Outside a container the tenant must at least not be
		 * root. */
		if (geteuid() == 0 && !a->cfg.map_users &&
		    a->cfg.run_as_uid <= 0) {
			cnl_seterr(
			    err, errlen,
			    "isolation = bare runs work outside a "
			    "container; as root it needs run_as_uid "
			    "(not 0) or map_users: tenant code never runs "
			    "as root");
			return -EPERM;
		}
		return 0;
	}
	if ((r = parse_mounts(a, err, errlen)) < 0)
		return r;
	if (find_binary(a->cfg.runtime && a->cfg.runtime[0] ? a->cfg.runtime
	                                                    : "crun",
	                a->runtime, sizeof(a->runtime)) < 0) {
		cnl_seterr(err, errlen,
		           "isolation = container needs the OCI runtime '%s' "
		           "on this node (Debian: apt-get install crun); not "
		           "found in PATH. On a single-user laptop, isolation "
		           "= bare runs work without containers",
		           a->cfg.runtime && a->cfg.runtime[0] ? a->cfg.runtime
		                                               : "crun");
		return -CNL_ENOTFOUND;
	}
	/* Every container's runtime runs from one sealed copy made here:
	 * no container can write to it through /proc/PID/exe, so crun
	 * does not copy and re-execute itself for each one (its
	 * libraries loaded twice). */
	r = cnl_launch_sealed_copy(a->runtime);
	if (r > 0) {
		a->runtime_fd = r;
	} else {
		if (r == 0)
			close(r);
		cnl_log(CNL_LOG_WARN,
		        "the OCI runtime runs from its path: no sealed copy",
		        "runtime=%s err=\"%s\"", a->runtime, cnl_strerror(r));
	}
	if (find_binary("umoci", a->umoci, sizeof(a->umoci)) < 0) {
		cnl_seterr(err, errlen,
		           "isolation = container needs umoci on this node to "
		           "unpack images (Debian: apt-get install umoci); not "
		           "found in PATH");
		return -CNL_ENOTFOUND;
	}
	if (find_beside("cnlab-init", X_OK, a->init, sizeof(a->init)) < 0) {
		cnl_seterr(err, errlen,
		           "isolation = container needs cnlab-init beside "
		           "cnlab-agent or in /usr/lib/cnlab (it is built and "
		           "installed with the agent)");
		return -CNL_ENOTFOUND;
	}
	if (geteuid() != 0) {
		cnl_seterr(err, errlen,
		           "isolation = container needs the agent to run as "
		           "root: it maps each user to a host id range of its "
		           "own (or set isolation = bare on a laptop)");
		return -EPERM;
	}
	if (a->cfg.uid_base < 65536 ||
	    a->cfg.uid_base > 0xffffffffLL - 1024LL * CNL_OCI_ID_COUNT) {
		cnl_seterr(err, errlen,
		           "uid_base %lld: want 65536 or more, with room for "
		           "1024 ranges of %u ids below 2^32",
		           (long long)a->cfg.uid_base, CNL_OCI_ID_COUNT);
		return -EINVAL;
	}
	/* crun refuses a hybrid cgroup host (v1 controllers and a cgroup2
	 * mount with controllers); it manages no cgroup here, so each
	 * workload's mount namespace simply goes without the cgroup2
	 * mount. */
	if (statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == TMPFS_MAGIC &&
	    statfs("/sys/fs/cgroup/unified", &sf) == 0 &&
	    sf.f_type == CGROUP2_SUPER_MAGIC)
		snprintf(a->hide_mount, sizeof(a->hide_mount),
		         "/sys/fs/cgroup/unified");
	if (mkdir(CNL_AGENT_VIEW, 0755) < 0 && errno != EEXIST) {
		cnl_seterr(err, errlen, "%s: %s", CNL_AGENT_VIEW,
		           strerror(errno));
		return -errno;
	}
	/* Workspace volumes (volume.h) need mkfs.ext4; a node without it
	 * runs everything else, and a server with a size fails naming it. */
	if (find_binary("mkfs.ext4", a->mkfs, sizeof(a->mkfs)) < 0)
		a->mkfs[0] = '\0';
	if (!a->mkfs[0] || access("/dev/loop-control", F_OK) < 0)
		cnl_log(CNL_LOG_WARN,
		        "servers with a size will fail: their workspace "
		        "volumes need mkfs.ext4 (e2fsprogs) and loop devices",
		        "mkfs=%s loop_control=%s",
		        a->mkfs[0] ? a->mkfs : "missing",
		        access("/dev/loop-control", F_OK) == 0 ? "yes" : "no");
	else
		cnl_log(CNL_LOG_INFO,
		        "workspace volumes: ext4 images on loop devices",
		        "dir=%s/volumes mkfs=%s", a->cfg.work_dir, a->mkfs);
	/* crun's state and the volume images are the agent's alone. */
	static const char *const sub[] = {"bundles",    "jobs",    "crun",
	                                  "workspaces", "regions", "volumes"};
	if ((r = cnl_agent_cdi_write(a, err, errlen)) < 0)
		return r;
	if (a->cfg.run_dir && a->cfg.run_dir[0] &&
	    (r = check_run_dir(a->cfg.run_dir, err, errlen)) < 0)
		return r;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(sub); i++) {
		bool own = i == 2 || i == 5;
		bool run = i == 0 || i == 2;

		snprintf(path, sizeof(path), "%s/%s",
		         run ? cnl_agent_rundir(a) : a->cfg.work_dir, sub[i]);
		if ((r = cnl_agent_mkdirs(path)) < 0 ||
		    chmod(path, own ? 0700 : 0711) < 0) {
			cnl_seterr(err, errlen, "%s: %s", path,
			           strerror(r < 0 ? -r : errno));
			return r < 0 ? r : -errno;
		}
	}
	return 0;
}

int cnl_agent_user_range(struct cnl_agent *a, const char *user,
                         unsigned *ret_base)
{
	char path[600], line[200], name[128];
	int slot = 0, max = 0, found = 0;
	FILE *f;

	if (!user || !user[0])
		goto done;
	snprintf(path, sizeof(path), "%s/users", a->cfg.work_dir);
	pthread_mutex_lock(&a->mu);
	f = fopen(path, "a+e");
	if (!f) {
		int e = -errno;
		pthread_mutex_unlock(&a->mu);
		return e;
	}
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		int s;

		if (sscanf(line, "%d %127s", &s, name) != 2)
			continue;
		if (s > max)
			max = s;
		if (strcmp(name, user) == 0)
			found = s;
	}
	slot = found;
	if (!found) {
		slot = max + 1;
		if (slot >= 1024 || fprintf(f, "%d %s\n", slot, user) < 0 ||
		    fflush(f) != 0 || fsync(fileno(f)) < 0) {
			fclose(f);
			pthread_mutex_unlock(&a->mu);
			return slot >= 1024 ? -CNL_ESIZE : -EIO;
		}
	}
	fclose(f);
	pthread_mutex_unlock(&a->mu);
done:
	*ret_base =
	    (unsigned)a->cfg.uid_base + (unsigned)slot * CNL_OCI_ID_COUNT;
	return 0;
}

static int write_file(const char *path, const char *text)
{
	int fd = open(
	    path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	size_t n = strlen(text);

	if (fd < 0)
		return -errno;
	if (write(fd, text, n) != (ssize_t)n) {
		int e = errno ? -errno : -EIO;
		close(fd);
		return e;
	}
	return close(fd) < 0 ? -errno : 0;
}

/* The text of @rel in the image's root @lower as the image sees it (a
 * link resolves inside the root, never out), at most @len - 1 bytes; ""
 * when it has none. */
static void image_text(int lower, const char *rel, char *buf, size_t len)
{
	/* O_PATH first: opening a FIFO or a device the image planted there
	 * would block the agent or touch the node's hardware. */
	struct open_how how = {.flags = O_PATH | O_CLOEXEC,
	                       .resolve =
	                           RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	int pfd = (int)syscall(SYS_openat2, lower, rel, &how, sizeof(how));
	char proc[64];
	struct stat st;
	ssize_t got = 0;
	int fd = -1;

	buf[0] = '\0';
	if (pfd < 0)
		return;
	if (fstat(pfd, &st) == 0 && S_ISREG(st.st_mode)) {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
		fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	}
	close(pfd);
	if (fd < 0)
		return;
	got = read(fd, buf, len - 1);
	close(fd);
	buf[got > 0 ? got : 0] = '\0';
	if (got > 0 && buf[got - 1] != '\n' && (size_t)got + 1 < len) {
		buf[got] = '\n';
		buf[got + 1] = '\0';
	}
}

/* Drop from @text (passwd or group lines) those of name @name or id @id
 * (the third field), so the tenant's line is the only one of either. */
static void drop_lines(char *text, const char *name, unsigned id)
{
	char *w = text, *line = text;

	while (*line) {
		char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
		size_t nl = strcspn(line, ":");
		const char *f = line;
		bool drop;

		for (int k = 0; k < 2 && f; k++)
			f = memchr(f, ':', len - (size_t)(f - line))
			        ? (const char *)memchr(
			              f, ':', len - (size_t)(f - line)) +
			              1
			        : NULL;
		drop = (nl == strlen(name) && strncmp(line, name, nl) == 0) ||
		       (f && strtoul(f, NULL, 10) == id && f[0] >= '0' &&
		        f[0] <= '9');
		if (!drop) {
			memmove(w, line, len);
			w += len;
		}
		line += len;
	}
	*w = '\0';
}

/*
 * /etc of a container under @root (the host image's root, or an image's
 * layer): passwd and group naming the tenant (for an image, its own lines
 * kept but those of the tenant's name or id; @lower is its root, else
 * -1), hosts, hostname, and ld.so.preload when the shim applies.
 */
static int etc_files(const char *root, int lower, const char *user,
                     const char *preload, const char *region)
{
	const char *name = user && user[0] ? user : "tenant";
	char p[800], text[64 * 1024 + 512];
	size_t o;
	int r;

	snprintf(p, sizeof(p), "%s/etc/passwd", root);
	if (lower >= 0) {
		image_text(lower, "etc/passwd", text, sizeof(text) - 512);
		drop_lines(text, name, CNL_OCI_TENANT_ID);
	} else {
		snprintf(text, sizeof(text),
		         "root:x:0:0:root:/root:/bin/sh\n"
		         "nobody:x:65534:65534:nobody:/nonexistent:"
		         "/usr/sbin/nologin\n");
	}
	o = strlen(text);
	snprintf(text + o, sizeof(text) - o,
	         "%s:x:%u:%u:%s:/workspace:/bin/sh\n", name, CNL_OCI_TENANT_ID,
	         CNL_OCI_TENANT_ID, name);
	if ((r = write_file(p, text)) < 0)
		return r;
	snprintf(p, sizeof(p), "%s/etc/group", root);
	if (lower >= 0) {
		image_text(lower, "etc/group", text, sizeof(text) - 512);
		drop_lines(text, name, CNL_OCI_TENANT_ID);
	} else {
		snprintf(text, sizeof(text), "root:x:0:\nnogroup:x:65534:\n");
	}
	o = strlen(text);
	snprintf(text + o, sizeof(text) - o, "%s:x:%u:\n", name,
	         CNL_OCI_TENANT_ID);
	if ((r = write_file(p, text)) < 0)
		return r;
	snprintf(p, sizeof(p), "%s/etc/hosts", root);
	if ((r = write_file(p, "127.0.0.1 localhost cnlab\n::1 localhost\n")) <
	    0)
		return r;
	snprintf(p, sizeof(p), "%s/etc/hostname", root);
	if ((r = write_file(p, "cnlab\n")) < 0)
		return r;
	if (preload) {
		snprintf(p, sizeof(p), "%s/etc/ld.so.preload", root);
		snprintf(text, sizeof(text), "%s\n", preload);
		if ((r = write_file(p, text)) < 0)
			return r;
	}
	/* The region pinned beside the preload (the shim's CNL_SHIM_PIN):
	 * the environment is the tenant's, this file is not. */
	if (preload && region && region[0]) {
		snprintf(p, sizeof(p), "%s/etc/cnlab", root);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		snprintf(p, sizeof(p), "%s/etc/cnlab/region", root);
		snprintf(text, sizeof(text), "%s\n", region);
		if ((r = write_file(p, text)) < 0)
			return r;
	}
	return 0;
}

/* Below a file system the runtime mounts afresh (tmpfs, proc, sysfs),
 * where it makes the mount points itself. */
static bool under_runtime_fs(const char *dest)
{
	static const char *const fs[] = {"/proc", "/dev", "/sys", "/tmp",
	                                 "/run"};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(fs); i++) {
		size_t l = strlen(fs[i]);

		if (strncmp(dest, fs[i], l) == 0 && dest[l] == '/')
			return true;
	}
	return false;
}

/* Whether a mount's source is a folder (sources under the workload's view
 * are looked at where they are on the node). */
static bool source_is_dir(const struct cnl_agent *a, const char *src)
{
	char p[1200];
	struct stat st;
	size_t l = strlen(CNL_AGENT_VIEW);

	if (strncmp(src, CNL_AGENT_VIEW, l) == 0 && src[l] == '/')
		snprintf(p, sizeof(p), "%s%s", a->cfg.work_dir, src + l);
	else
		snprintf(p, sizeof(p), "%s", src);
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
 * The mount point @dest (absolute) of a container of an image, made in
 * its layer @up where the image (@lower) does not have it: folders on the
 * way, then a folder or an empty file.  A link in the image on the way is
 * refused, never followed; so is a folder where a file is mounted or the
 * other way round.
 */
static int mount_point(int lower, int up, const char *dest, bool file,
                       char *err, size_t errlen)
{
	char path[300], *save = NULL, *comp, *next;
	int lo = dup(lower), u = dup(up), r = 0;

	snprintf(path, sizeof(path), "%s", dest);
	comp = strtok_r(path, "/", &save);
	while (comp && r == 0) {
		struct stat st;
		bool there;

		next = strtok_r(NULL, "/", &save);
		there =
		    lo >= 0 && fstatat(lo, comp, &st, AT_SYMLINK_NOFOLLOW) == 0;
		if (there && (S_ISLNK(st.st_mode) ||
		              (next || !file ? !S_ISDIR(st.st_mode)
		                             : S_ISDIR(st.st_mode)))) {
			cnl_seterr(
			    err, errlen,
			    "the image has %s at a path of %s: %s cannot "
			    "be mounted there",
			    S_ISLNK(st.st_mode)   ? "a link"
			    : S_ISDIR(st.st_mode) ? "a folder"
			                          : "a file",
			    dest, dest);
			r = -CNL_EFIELD;
			break;
		}
		if (next) {
			int nlo = there ? openat(lo, comp,
			                         O_RDONLY | O_DIRECTORY |
			                             O_NOFOLLOW | O_CLOEXEC)
			                : -1;
			int nu;

			if (mkdirat(u, comp, 0755) < 0 && errno != EEXIST)
				r = -errno;
			nu = openat(u, comp,
			            O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			                O_CLOEXEC);
			if (nu < 0 && r == 0)
				r = -errno;
			if (lo >= 0)
				close(lo);
			close(u);
			lo = nlo;
			u = nu;
		} else if (!there) {
			int fd;

			if (!file) {
				if (mkdirat(u, comp, 0755) < 0 &&
				    errno != EEXIST)
					r = -errno;
			} else if ((fd = openat(u, comp,
			                        O_WRONLY | O_CREAT |
			                            O_NOFOLLOW | O_CLOEXEC,
			                        0644)) < 0) {
				r = -errno;
			} else {
				close(fd);
			}
		}
		comp = next;
	}
	if (r < 0 && !err[0])
		cnl_seterr(err, errlen, "cannot make mount point %s: %s", dest,
		           strerror(-r));
	if (lo >= 0)
		close(lo);
	if (u >= 0)
		close(u);
	return r;
}

/* The skeleton of the "host" image under @root: top-level directories,
 * the node's /bin, /lib... links, and /etc.  Adds the read-only bind
 * mounts it needs to @m (at most @cap). */
static int host_rootfs(const char *root, const char *user, const char *preload,
                       const char *region, struct cnl_oci_mount *m, size_t *n,
                       size_t cap)
{
	static const char *const dirs[] = {"usr",  "etc", "proc", "dev",
	                                   "sys",  "tmp", "run",  "workspace",
	                                   "home", "var", "opt",  "root"};
	/* The node's top-level program and library directories: a link
	 * (merged /usr) is copied, a directory bound read-only. */
	static const char *const top[] = {"/bin",   "/sbin",  "/lib",
	                                  "/lib32", "/lib64", "/libx32"};
	/* From the node's /etc, read-only, where present. */
	static const char *const etc[] = {
	    "/etc/ld.so.cache",  "/etc/ld.so.conf",    "/etc/ld.so.conf.d",
	    "/etc/alternatives", "/etc/ssl",           "/etc/ca-certificates",
	    "/etc/localtime",    "/etc/nsswitch.conf", "/etc/resolv.conf",
	    "/etc/protocols",    "/etc/services",      "/etc/mime.types",
	    "/etc/python3",      "/etc/python3.11"};
	char p[800];

	for (size_t i = 0; i < CNL_ARRAY_SIZE(dirs); i++) {
		snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	snprintf(p, sizeof(p), "%s/tmp", root);
	(void)chmod(p, 01777);
	if (*n + 1 + CNL_ARRAY_SIZE(top) + CNL_ARRAY_SIZE(etc) > cap)
		return -CNL_ESIZE;
	m[(*n)++] = (struct cnl_oci_mount){"/usr", "/usr", "bind", true, NULL};
	for (size_t i = 0; i < CNL_ARRAY_SIZE(top); i++) {
		char link[256];
		struct stat st;
		ssize_t len;

		if (lstat(top[i], &st) < 0)
			continue;
		snprintf(p, sizeof(p), "%s%s", root, top[i]);
		if (S_ISLNK(st.st_mode)) {
			len = readlink(top[i], link, sizeof(link) - 1);
			if (len <= 0)
				continue;
			link[len] = '\0';
			if (symlink(link, p) < 0 && errno != EEXIST)
				return -errno;
		} else if (S_ISDIR(st.st_mode)) {
			if (mkdir(p, 0755) < 0 && errno != EEXIST)
				return -errno;
			m[(*n)++] = (struct cnl_oci_mount){top[i], top[i],
			                                   "bind", true, NULL};
		}
	}
	for (size_t i = 0; i < CNL_ARRAY_SIZE(etc); i++)
		if (access(etc[i], F_OK) == 0)
			m[(*n)++] = (struct cnl_oci_mount){etc[i], etc[i],
			                                   "bind", true, NULL};
	return etc_files(root, -1, user, preload, region);
}

/* The overlay of an image: its unpacked root (lower, shared, never
 * written), the container's own layer (upper) and the kernel's work
 * folder, in the bundle. */
static int image_rootfs(struct cnl_agent *a, const struct cnl_agent_ctr *c,
                        const char *bundle, const char *root,
                        const struct cnl_oci_mount *m, size_t n,
                        const char *preload, char *err, size_t errlen)
{
	static const char *const top[] = {"/proc", "/dev",       "/sys", "/tmp",
	                                  "/run",  "/workspace", "/etc"};
	char upper[700], work[700], opts[2200], region[700];
	int lower = -1, up = -1, r = 0;

	snprintf(upper, sizeof(upper), "%s/upper", bundle);
	snprintf(work, sizeof(work), "%s/work", bundle);
	if (strpbrk(c->image_root, ",:") || strpbrk(bundle, ",:")) {
		cnl_seterr(err, errlen,
		           "%s: a path with ',' or ':' cannot hold an overlay",
		           cnl_agent_rundir(a));
		return -EINVAL;
	}
	if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 ||
	    (lower = open(c->image_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) <
	        0 ||
	    (up = open(upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot prepare the image's layer: %s",
		           strerror(errno));
		goto out;
	}
	/* The mount points, made in the container's layer: the runtime
	 * (the container's root) may not write in the image's folders. */
	for (size_t i = 0; i < CNL_ARRAY_SIZE(top) && r == 0; i++)
		r = mount_point(lower, up, top[i], false, err, errlen);
	for (size_t i = 0; i < n && r == 0; i++)
		if (!under_runtime_fs(m[i].dest))
			r = mount_point(lower, up, m[i].dest,
			                !source_is_dir(a, m[i].source), err,
			                errlen);
	if (r < 0)
		goto out;
	cnl_agent_view(a, c->region ? c->region : "", region, sizeof(region));
	if ((mkdirat(up, "etc", 0755) < 0 && errno != EEXIST && (r = -errno)) ||
	    (r = etc_files(upper, lower, c->user, preload, region)) < 0) {
		cnl_seterr(err, errlen, "cannot write the container's /etc: %s",
		           strerror(-r));
		goto out;
	}
	/* The container's root owns its "/" (as with "host"). */
	if (fchown(up, c->host_id_base, c->host_id_base) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot hand %s to the container: %s",
		           upper, strerror(errno));
		goto out;
	}
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s",
	         c->image_root, upper, work);
	if (mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV, opts) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot mount the image's overlay: %s",
		           strerror(errno));
	}
out:
	if (lower >= 0)
		close(lower);
	if (up >= 0)
		close(up);
	return r;
}

/* The environment of a container of an image: the image's own (config.
 * Env) under the agent's, except the image's PATH, which its programs
 * need.  Into @out (at most @cap - 1 and a NULL). */
static void merge_env(const char *const *ours, char *const *image,
                      const char **out, size_t cap)
{
	size_t n = 0;
	bool image_path = false;

	for (size_t i = 0; image && image[i] && n + 1 < cap; i++) {
		size_t k = strcspn(image[i], "=");
		bool shadowed = false;

		if (k == 4 && strncmp(image[i], "PATH", 4) == 0) {
			image_path = true;
		} else {
			for (size_t j = 0; ours[j] && !shadowed; j++)
				shadowed =
				    strncmp(ours[j], image[i], k + 1) == 0;
		}
		if (!shadowed)
			out[n++] = image[i];
	}
	for (size_t j = 0; ours[j] && n + 1 < cap; j++)
		if (!image_path || strncmp(ours[j], "PATH=", 5) != 0)
			out[n++] = ours[j];
	out[n] = NULL;
}

/* Words the shell would pass on unchanged: nothing it expands, quotes,
 * redirects, joins or treats as a comment. */
static bool plain_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') || strchr("_-./,:+@%=", ch);
}

/* The shell's own commands: run by name they would not do what they do
 * in the shell (or not be found). */
static const char *const sh_builtins[] = {
    ".",        ":",       "alias",  "bg",    "break",  "cd",       "command",
    "continue", "eval",    "exec",   "exit",  "export", "fg",       "getopts",
    "hash",     "jobs",    "let",    "local", "read",   "readonly", "return",
    "set",      "shift",   "source", "times", "trap",   "type",     "ulimit",
    "umask",    "unalias", "unset",  "wait",
};

int cnl_agent_plain_argv(const char *command, char *buf, size_t buflen,
                         const char **words, int max)
{
	size_t len = strlen(command);
	int n = 0;

	if (len == 0 || len >= buflen || max < 1)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!plain_char(command[i]) && command[i] != ' ')
			return 0;
	memcpy(buf, command, len + 1);
	for (char *p = buf; *p;) {
		while (*p == ' ')
			*p++ = '\0';
		if (!*p)
			break;
		if (n == max)
			return 0;
		words[n++] = p;
		while (*p && *p != ' ')
			p++;
	}
	/* An assignment, a builtin, or nothing at all: the shell's. */
	if (n == 0 || strchr(words[0], '='))
		return 0;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(sh_builtins); i++)
		if (strcmp(words[0], sh_builtins[i]) == 0)
			return 0;
	return n;
}

int cnl_agent_bundle(struct cnl_agent *a, const struct cnl_agent_ctr *c,
                     char *bundle, size_t bundle_len, char *err, size_t errlen)
{
	struct cnl_oci_mount m[56];
	size_t n = 0;
	char root[700], crun_state[700], ws[700], region[700], board[700];
	char acct[700], acct_view[700], secrets[700], ssh[700];
	/* A command of plain words is run by cnlab-init itself (a search
	 * of PATH, 127 when not found, as the shell would); anything else
	 * by "/bin/sh -c": no shell started for "python3 train.py". */
	const char *args[34] = {INIT_IN_CONTAINER, "/bin/sh", "-c", c->command,
	                        NULL};
	const char *plain[CNL_ARRAY_SIZE(args) - 2];
	char words[4096];
	int nw = cnl_agent_plain_argv(c->command, words, sizeof(words), plain,
	                              (int)CNL_ARRAY_SIZE(plain));
	const char *env[160];
	/* Where the container sees its shim (in /etc/ld.so.preload), or
	 * NULL for none. */
	const char *preload = !c->shim || !c->shim[0] ? NULL
	                      : c->hip                ? SHIM_HIP_IN_CONTAINER
	                                              : SHIM_IN_CONTAINER;
	int r;

	for (int i = 0; i < nw; i++)
		args[1 + i] = plain[i];
	if (nw > 0)
		args[1 + nw] = NULL;
	snprintf(bundle, bundle_len, "%s/bundles/%s", cnl_agent_rundir(a),
	         c->id);
	/* What an earlier start of the same id left (an agent killed
	 * between launch and clean-up) goes first. */
	cnl_agent_bundle_drop(a, c->id);
	snprintf(root, sizeof(root), "%s/rootfs", bundle);
	if (mkdir(bundle, 0700) < 0 || mkdir(root, 0755) < 0 ||
	    chown(bundle, c->host_id_base, c->host_id_base) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot create bundle %s: %s", bundle,
		           strerror(errno));
		return r;
	}
	cnl_agent_view(a, c->region ? c->region : "", region, sizeof(region));
	if (!c->image_root) {
		r = host_rootfs(root, c->user, preload, region, m, &n,
		                CNL_ARRAY_SIZE(m) - 10 - CNL_AGENT_MOUNTS_MAX);
		if (r < 0) {
			cnl_seterr(err, errlen,
			           "cannot build the root file system "
			           "of %s: %s",
			           c->id, cnl_strerror(r));
			goto out;
		}
		/* The container's root owns its rootfs (read-only once
		 * running), so the runtime can make its mount points. */
		if ((r = cnl_agent_chown_tree(root, (int)c->host_id_base,
		                              (int)c->host_id_base)) < 0) {
			cnl_seterr(err, errlen,
			           "cannot hand %s to the container: %s", root,
			           strerror(-r));
			goto out;
		}
	}
	cnl_agent_view(a, c->workspace, ws, sizeof(ws));
	m[n++] = (struct cnl_oci_mount){"/workspace", ws, "bind", false, NULL};
	for (int i = 0; i < a->n_mounts; i++)
		m[n++] =
		    (struct cnl_oci_mount){a->mounts[i].dest, a->mounts[i].host,
		                           "bind", a->mounts[i].ro, NULL};
	m[n++] = (struct cnl_oci_mount){INIT_IN_CONTAINER, a->init, "bind",
	                                true, NULL};
	if (a->notebook[0])
		m[n++] = (struct cnl_oci_mount){CNL_AGENT_NOTEBOOK, a->notebook,
		                                "bind", true, NULL};
	if (preload)
		m[n++] = (struct cnl_oci_mount){preload, c->shim, "bind", true,
		                                NULL};
	/* The region and the board at their node paths: the region names
	 * its board by path.  The region's limits are read-only to the
	 * tenant, its accounting file writable (region.h). */
	cnl_agent_view(a, c->board ? c->board : "", board, sizeof(board));
	if (c->region && c->region[0] &&
	    cnl_region_acct_path(c->region, acct, sizeof(acct)) == 0 &&
	    cnl_region_acct_path(region, acct_view, sizeof(acct_view)) == 0) {
		m[n++] = (struct cnl_oci_mount){c->region, region, "bind", true,
		                                NULL};
		m[n++] = (struct cnl_oci_mount){acct, acct_view, "bind", false,
		                                NULL};
	}
	if (c->board && c->board[0])
		m[n++] = (struct cnl_oci_mount){c->board, board, "bind", false,
		                                NULL};
	/* Its secrets, read-only, over the container's /run tmpfs. */
	if (c->secrets && c->secrets[0]) {
		cnl_agent_view(a, c->secrets, secrets, sizeof(secrets));
		m[n++] = (struct cnl_oci_mount){"/run/secrets", secrets, "bind",
		                                true, NULL};
	}
	/* A server's ssh folder, read-only; and for an image, the node's
	 * /usr (read-only, as the "host" image has it) where the image has
	 * no sshd of its own (tunnel.c runs the node's through its loader). */
	if (c->ssh && c->ssh[0]) {
		cnl_agent_view(a, c->ssh, ssh, sizeof(ssh));
		m[n++] = (struct cnl_oci_mount){CNL_AGENT_SSH_DIR, ssh, "bind",
		                                true, NULL};
		if (c->image_root && access(CNL_AGENT_SSHD, X_OK) == 0)
			m[n++] = (struct cnl_oci_mount){
			    CNL_AGENT_HOST_USR, "/usr", "bind", true, NULL};
	}
	if (c->image_root) {
		r = image_rootfs(a, c, bundle, root, m, n, preload, err,
		                 errlen);
		if (r < 0)
			goto out;
		merge_env(c->env, c->image_env, env, CNL_ARRAY_SIZE(env));
	}
	r = cnl_oci_write(bundle,
	                  &(struct cnl_oci_spec){
	                      .argv = args,
	                      .env = c->image_root ? env : c->env,
	                      .cwd = "/workspace",
	                      .hostname = "cnlab",
	                      .rootfs = "rootfs",
	                      .host_id_base = c->host_id_base,
	                      .host_network = c->host_network,
	                      .mounts = m,
	                      .n_mounts = n,
	                      .devices = c->devices,
	                  },
	                  err, errlen);
	snprintf(crun_state, sizeof(crun_state), "%s/crun/%s",
	         cnl_agent_rundir(a), c->id);
	cnl_agent_rmtree(crun_state);
out:
	if (r < 0)
		cnl_agent_bundle_drop(a, c->id);
	return r;
}

void cnl_agent_bundle_drop(struct cnl_agent *a, const char *id)
{
	char p[700];

	if (a->cfg.bare)
		return;
	/* An image's overlay first: the tree below is then the bundle's. */
	snprintf(p, sizeof(p), "%s/bundles/%s/rootfs", cnl_agent_rundir(a), id);
	if (umount2(p, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		cnl_log(CNL_LOG_WARN, "cannot unmount", "path=%s err=\"%s\"", p,
		        strerror(errno));
	snprintf(p, sizeof(p), "%s/bundles/%s", cnl_agent_rundir(a), id);
	cnl_agent_rmtree(p);
	snprintf(p, sizeof(p), "%s/crun/%s", cnl_agent_rundir(a), id);
	cnl_agent_rmtree(p);
}

/* ---- workspaces ---------------------------------------------------------- */

static void workspace_paths(const struct cnl_agent *a, const char *id,
                            char *dir, size_t dirlen, char *image,
                            size_t imagelen)
{
	snprintf(dir, dirlen, "%s/workspaces/%s", a->cfg.work_dir, id);
	snprintf(image, imagelen, "%s/volumes/%s.img", a->cfg.work_dir, id);
}

/* Whether folder @dir holds anything (a missing one holds nothing). */
static bool has_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool any = false;

	if (!d)
		return false;
	while (!any && (e = readdir(d)))
		any =
		    strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return any;
}

int cnl_agent_workspace_open(struct cnl_agent *a, const struct wk *w,
                             int64_t gb, char *err, size_t errlen)
{
	char dir[600], image[600];
	int r;

	if (a->cfg.bare || gb <= 0)
		return 0;
	if (gb > INT64_MAX / 1000000000) {
		cnl_seterr(err, errlen,
		           "a workspace of %" PRId64 " GB: too large", gb);
		return -EFBIG;
	}
	workspace_paths(a, w->id, dir, sizeof(dir), image, sizeof(image));
	if (access(image, F_OK) < 0) {
		/* A workspace from before volumes: its files are the
		 * tenant's, and a volume mounted over them would hide them. */
		if (cnl_volume_mounted(dir) == 0 && has_files(dir))
			return 1;
		if ((r = cnl_volume_create(image, (uint64_t)gb * 1000000000u,
		                           a->mkfs, err, errlen)) < 0)
			return r;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot create %s: %s", dir,
		           strerror(-r));
		return r;
	}
	return cnl_volume_mount(image, dir, err, errlen);
}

void cnl_agent_workspace_close(struct cnl_agent *a, const struct wk *w)
{
	char dir[600], image[600];
	int r;

	workspace_paths(a, w->id, dir, sizeof(dir), image, sizeof(image));
	if ((r = cnl_volume_unmount(dir)) < 0)
		cnl_log(CNL_LOG_WARN, "cannot unmount a workspace",
		        "id=%s dir=%s err=\"%s\"", w->id, dir, strerror(-r));
}

/* Whether @name can be a server's id: what the control plane makes
 * ("srv_" and letters and digits), nothing that walks a path. */
static bool id_name(const char *name, size_t len)
{
	if (len == 0 || len >= CNL_WIRE_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(name[i] >= 'a' && name[i] <= 'z') &&
		    !(name[i] >= 'A' && name[i] <= 'Z') &&
		    !(name[i] >= '0' && name[i] <= '9') && name[i] != '_' &&
		    name[i] != '-')
			return false;
	return true;
}

/* Add the server ids of folder @sub's entries (less @suffix) to @ids. */
static void list_ids(const struct cnl_agent *a, const char *sub,
                     const char *suffix, char (**ids)[CNL_WIRE_ID_MAX],
                     size_t *n, size_t *cap)
{
	char path[600];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "%s/%s", a->cfg.work_dir, sub);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name), sl = strlen(suffix);
		bool seen = false;

		if (len <= sl || strcmp(e->d_name + len - sl, suffix) != 0 ||
		    !id_name(e->d_name, len - sl))
			continue;
		for (size_t i = 0; i < *n && !seen; i++)
			seen = strncmp((*ids)[i], e->d_name, len - sl) == 0 &&
			       (*ids)[i][len - sl] == '\0';
		if (seen || *n >= CNL_WIRE_LIST_MAX)
			continue;
		if (*n == *cap) {
			*cap = *cap ? 2 * *cap : 16;
			*ids = cnl_xrealloc(*ids, *cap * sizeof(**ids));
		}
		snprintf((*ids)[(*n)++], sizeof((*ids)[0]), "%.*s",
		         (int)(len - sl), e->d_name);
	}
	closedir(d);
}

size_t cnl_agent_workspaces_list(struct cnl_agent *a,
                                 char (**ret_ids)[CNL_WIRE_ID_MAX])
{
	size_t n = 0, cap = 0;

	*ret_ids = NULL;
	list_ids(a, "workspaces", "", ret_ids, &n, &cap);
	list_ids(a, "volumes", ".img", ret_ids, &n, &cap);
	return n;
}

void cnl_agent_workspace_delete(struct cnl_agent *a, const char *id)
{
	char dir[600], image[700];
	int r;

	if (!id_name(id, strlen(id)))
		return;
	workspace_paths(a, id, dir, sizeof(dir), image, sizeof(image));
	if ((r = cnl_volume_unmount(dir)) < 0) {
		/* Its files stay rather than be removed from under a mount. */
		cnl_log(CNL_LOG_WARN,
		        "cannot unmount a deleted server's volume",
		        "id=%s err=\"%s\"", id, strerror(-r));
		return;
	}
	cnl_agent_rmtree(dir);
	unlink(image);
	snprintf(image, sizeof(image), "%s/volumes/%s.img.new", a->cfg.work_dir,
	         id);
	unlink(image);
	cnl_log(CNL_LOG_INFO, "server deleted; its workspace removed", "id=%s",
	        id);
}

void cnl_agent_workspaces_sweep(struct cnl_agent *a)
{
	char(*ids)[CNL_WIRE_ID_MAX];
	size_t n = cnl_agent_workspaces_list(a, &ids);

	for (size_t i = 0; i < n; i++) {
		char dir[600];
		bool ours;

		snprintf(dir, sizeof(dir), "%s/workspaces/%s", a->cfg.work_dir,
		         ids[i]);
		pthread_mutex_lock(&a->mu);
		ours = cnl_agent_wk_find(a, ids[i]) != NULL;
		pthread_mutex_unlock(&a->mu);
		if (ours || cnl_volume_mounted(dir) != 1)
			continue;
		if (cnl_volume_unmount(dir) == 0)
			cnl_log(CNL_LOG_INFO,
			        "unmounted the volume of a server that ended "
			        "while the agent was away",
			        "id=%s", ids[i]);
	}
	free(ids);
}
