/*
 * fake_nvml.c - a fake libnvidia-ml.so.1.
 *
 * For the shim's tests it models the fake GPU of fake_gpu.h: device 0's
 * memory is CNL_FAKE_MEM bytes, used by the processes registered in the
 * shared fake GPU state (each one's device memory as the fake driver counts
 * it), which the process lists report.  As the real driver does, the lists
 * name host pids (a process registered from inside a PID namespace is
 * found on the host by its namespace), and each process is on the device
 * its CUDA_VISIBLE_DEVICES names (an index, a GPU UUID or a MIG device's
 * UUID; device 0 without one): a GPU's list holds all its processes, those
 * in its MIG devices too, a MIG device's list only its own.  The lists keep
 * nvml.h's count protocol (INSUFFICIENT_SIZE with the count needed).  Not
 * modelled: a SIGKILLed process of a PID namespace leaves its slot, which
 * reads as a live process's when the kernel reuses the namespace's inode
 * and the pid, until that process registers (and clears it).
 *
 * For the agent's GPU provider it models a node of several GPUs and their
 * MIG instances, configured by environment variables read when nvmlInit
 * takes the first reference (the instances are reset then too, so a test
 * starts each open from a clean node):
 *
 *   FAKE_NVML_GPUS=n        devices 0..n-1 (1..16; default 1)
 *   FAKE_NVML_NAME=s        every device's name (default
 *                           "NVIDIA H100 80GB HBM3", an H100 SXM)
 *   FAKE_NVML_MEM_MIB=m     every device's memory (default CNL_FAKE_MEM or
 *                           16 GiB, what the shim's tests expect)
 *   FAKE_NVML_MIG=0         the devices have no MIG (NOT_SUPPORTED)
 *   FAKE_NVML_MIG_RESET=1   enabling MIG stays pending until a GPU reset,
 *                           as on an A100 whose mode cannot switch live
 *   FAKE_NVML_LOST=i        device i fell off the bus: memory queries
 *                           fail with GPU_IS_LOST (read at every call)
 *
 * MIG follows nvml.h and an H100 80GB's `nvidia-smi mig -lgip`: the GPU
 * instance profiles 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb,
 * 4g.40gb and 7g.80gb, each reached through its NVML_GPU_INSTANCE_PROFILE_*
 * constant and carrying the driver's own profile ID (19, 20, 15, 14, 9, 5,
 * 0), which is what placement and creation take, so a caller that confuses
 * the two fails here as on a real GPU.  A GPU instance occupies memory
 * slices [start, start + size) and compute slices [start, start + slices);
 * one that overlaps a live instance in either, or goes past the profile's
 * instance count, is refused with INSUFFICIENT_RESOURCES.  MIG calls fail
 * with NOT_SUPPORTED while MIG mode is off; enabling it fails with IN_USE
 * while processes run on the GPU.  A GPU instance holds at most one compute
 * instance (the agent creates one full one per GPU instance), and cannot
 * be destroyed while it has one (IN_USE).  MIG devices are found with
 * nvmlDeviceGetMigDeviceHandleByIndex and their UUIDs are "MIG-fake-...";
 * nvmlDeviceGetMemoryInfo on a MIG device's handle gives its GPU
 * instance's memory (the profile's size) and what the instance's processes
 * hold, and GPU instance IDs are the lowest free from 1, never the start
 * slot (a caller that takes one for the other is caught).
 * Not modelled: several compute instances per GPU instance, media-engine
 * exclusivity beyond the +me profile's count of one, other GPU models'
 * profile tables (every MIG-capable fake GPU is an H100 80GB).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim/cuda-abi.h"
#include "fake_gpu.h"

#define API __attribute__((visibility("default")))

/* The entry points implement an ABI that cuda.h and nvml.h declare. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

/* nvml.h's MIG declarations, as far as the fake models them. */
#define NVML_ERROR_NOT_FOUND                        6
#define NVML_ERROR_GPU_IS_LOST                      15
#define NVML_ERROR_RESET_REQUIRED                   16
#define NVML_ERROR_IN_USE                           19
#define NVML_ERROR_INSUFFICIENT_RESOURCES           23
#define NVML_DEVICE_MIG_DISABLE                     0
#define NVML_DEVICE_MIG_ENABLE                      1
#define NVML_GPU_INSTANCE_PROFILE_COUNT             0x11
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT         0x8
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef struct {
	unsigned int start;
	unsigned int size;
} nvmlGpuInstancePlacement_t, nvmlComputeInstancePlacement_t;

typedef struct {
	unsigned int id;
	unsigned int isP2pSupported;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int copyEngineCount;
	unsigned int decoderCount;
	unsigned int encoderCount;
	unsigned int jpegCount;
	unsigned int ofaCount;
	unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
	nvmlDevice_t device;
	unsigned int id;
	unsigned int profileId;
	nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
	unsigned int id;
	unsigned int sliceCount;
	unsigned int instanceCount;
	unsigned int multiprocessorCount;
	unsigned int sharedCopyEngineCount;
	unsigned int sharedDecoderCount;
	unsigned int sharedEncoderCount;
	unsigned int sharedJpegCount;
	unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
	nvmlDevice_t device;
	nvmlGpuInstance_t gpuInstance;
	unsigned int id;
	unsigned int profileId;
	nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* ---- the node ----------------------------------------------------------- */

#define FAKE_DEVS 16
#define FAKE_GIS  7 /* at most seven GPU instances on a GPU */

/* One GPU-instance profile, as nvidia-smi mig -lgip lists an H100 80GB. */
struct gi_profile {
	unsigned cnst;       /* NVML_GPU_INSTANCE_PROFILE_* */
	unsigned id;         /* the driver's profile ID */
	unsigned slices;     /* compute slices */
	unsigned mem_slices; /* memory slices: the placement size */
	unsigned count;      /* instances at once */
	unsigned sms;
	unsigned starts; /* bit s: start s allowed */
	unsigned long long mib;
};

static const struct gi_profile gi_profiles[] = {
    {0x0, 19, 1, 1, 7, 16, 0x7f, 9984},  /* 1g.10gb */
    {0x7, 20, 1, 1, 1, 16, 0x7f, 9984},  /* 1g.10gb+me (1_SLICE_REV1) */
    {0x9, 15, 1, 2, 4, 26, 0x55, 20096}, /* 1g.20gb (1_SLICE_REV2) */
    {0x1, 14, 2, 2, 3, 32, 0x15, 20096}, /* 2g.20gb */
    {0x2, 9, 3, 4, 2, 60, 0x11, 40448},  /* 3g.40gb */
    {0x3, 5, 4, 4, 1, 64, 0x01, 40448},  /* 4g.40gb */
    {0x4, 0, 7, 8, 1, 132, 0x01, 81152}, /* 7g.80gb */
};

/* Compute-instance profiles 1, 2, 3, 4 and 7 slices: ID = constant. */
static const unsigned ci_slices[] = {1, 2, 3, 4, 7};

struct fake_ci {
	bool live;
	unsigned id;
	unsigned profile;
	char mig; /* its address is the MIG device handle */
};

struct fake_gi {
	bool live;
	unsigned id;
	unsigned start;
	const struct gi_profile *p;
	struct fake_ci ci;
};

struct fake_dev {
	char name[96];
	char uuid[80];
	unsigned long long mem;
	unsigned mig_current, mig_pending;
	struct fake_gi gi[FAKE_GIS];
};

static struct {
	bool loaded;
	int refs;
	unsigned n;
	bool mig, mig_reset;
	struct fake_dev dev[FAKE_DEVS];
} node;

static unsigned long long env_ull(const char *name, unsigned long long def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return def;
	x = strtoull(v, &end, 0);
	return *end ? def : x;
}

static void load(void)
{
	const char *name = getenv("FAKE_NVML_NAME");
	unsigned long long n = env_ull("FAKE_NVML_GPUS", 1);
	unsigned long long mem = env_ull("FAKE_NVML_MEM_MIB", 0) << 20;

	int refs = node.refs; /* nvmlInit's count survives the reset */

	memset(&node, 0, sizeof(node));
	node.refs = refs;
	node.loaded = true;
	node.n = n >= 1 && n <= FAKE_DEVS ? (unsigned)n : 1;
	node.mig = env_ull("FAKE_NVML_MIG", 1) != 0;
	node.mig_reset = env_ull("FAKE_NVML_MIG_RESET", 0) != 0;
	for (unsigned i = 0; i < node.n; i++) {
		struct fake_dev *d = &node.dev[i];

		snprintf(d->name, sizeof(d->name), "%s",
		         name ? name : "NVIDIA H100 80GB HBM3");
		snprintf(d->uuid, sizeof(d->uuid),
		         "GPU-fake-%08x-0000-4000-8000-%012u", 0xc0ffee00u + i,
		         i);
		d->mem = mem;
	}
}

static void ensure(void)
{
	if (!node.loaded)
		load();
}

static struct fake_dev *dev_of(nvmlDevice_t h)
{
	ensure();
	for (unsigned i = 0; i < node.n; i++)
		if ((void *)h == (void *)&node.dev[i])
			return &node.dev[i];
	return NULL;
}

/* The GPU instance whose live compute instance is the MIG device @h. */
static struct fake_gi *mig_of(nvmlDevice_t h, struct fake_dev **ret_dev)
{
	ensure();
	for (unsigned i = 0; i < node.n; i++)
		for (int j = 0; j < FAKE_GIS; j++) {
			struct fake_gi *gi = &node.dev[i].gi[j];

			if (gi->live && gi->ci.live &&
			    (void *)h == (void *)&gi->ci.mig) {
				*ret_dev = &node.dev[i];
				return gi;
			}
		}
	return NULL;
}

static struct fake_gi *gi_of(nvmlGpuInstance_t h, struct fake_dev **ret_dev)
{
	ensure();
	for (unsigned i = 0; i < node.n; i++)
		for (int j = 0; j < FAKE_GIS; j++)
			if (node.dev[i].gi[j].live &&
			    (void *)h == (void *)&node.dev[i].gi[j]) {
				*ret_dev = &node.dev[i];
				return &node.dev[i].gi[j];
			}
	return NULL;
}

static struct fake_gi *ci_of(nvmlComputeInstance_t h, struct fake_dev **ret_dev)
{
	ensure();
	for (unsigned i = 0; i < node.n; i++)
		for (int j = 0; j < FAKE_GIS; j++) {
			struct fake_gi *gi = &node.dev[i].gi[j];

			if (gi->live && gi->ci.live &&
			    (void *)h == (void *)&gi->ci) {
				*ret_dev = &node.dev[i];
				return gi;
			}
		}
	return NULL;
}

static bool is_lost(const struct fake_dev *d)
{
	const char *v = getenv("FAKE_NVML_LOST");

	return v && *v &&
	       env_ull("FAKE_NVML_LOST", 99) == (unsigned)(d - node.dev);
}

/* ---- the shim's fake GPU ------------------------------------------------ */

static struct fake_gpu *gpu;

static struct fake_gpu *state(void)
{
	const char *path = getenv("CNL_FAKE_GPU");
	int fd;

	if (gpu)
		return gpu;
	struct stat st;

	if (!path || (fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return NULL;
	/* Not yet sized by the first CUDA process: nothing runs yet (a
	 * mapping past the end would fault). */
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(*gpu)) {
		close(fd);
		return NULL;
	}
	gpu =
	    mmap(NULL, sizeof(*gpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (gpu == MAP_FAILED)
		gpu = NULL;
	return gpu;
}

static unsigned long long capacity(const struct fake_dev *d)
{
	const char *mem = getenv("CNL_FAKE_MEM");

	if (d->mem)
		return d->mem;
	return mem ? strtoull(mem, NULL, 0) : FAKE_DEFAULT_MEM;
}

API nvmlReturn_t nvmlInit_v2(void)
{
	if (node.refs++ == 0)
		load();
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlShutdown(void)
{
	if (node.refs > 0)
		node.refs--;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	ensure();
	if (!n)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = node.n;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	ensure();
	if (i >= node.n || !d)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = (nvmlDevice_t)&node.dev[i];
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_out(const char *s, char *buf, unsigned int len)
{
	if (!buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) >= len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int len)
{
	struct fake_dev *d = dev_of(h);

	return d ? copy_out(d->name, name, len) : NVML_ERROR_INVALID_ARGUMENT;
}

/* A GPU's UUID, or a MIG device's ("MIG-fake-<gpu>-<gi>-<ci>"). */
API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int len)
{
	struct fake_dev *d = dev_of(h);
	struct fake_gi *gi;
	char buf[80];

	if (d)
		return copy_out(d->uuid, uuid, len);
	if (!(gi = mig_of(h, &d)))
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(buf, sizeof(buf), "MIG-fake-%04x-%04x-%04x",
	         (unsigned)(d - node.dev), gi->id, gi->ci.id);
	return copy_out(buf, uuid, len);
}

/*
 * The processes, as the driver sees them: host pids, whatever PID
 * namespace each runs in (a slot's pid is in its own namespace: found on
 * the host by that namespace's inode and the last NSpid of
 * /proc/PID/status), each on the device its CUDA_VISIBLE_DEVICES names
 * (first entry: an index, a GPU UUID or a MIG device's UUID; none, or one
 * this process cannot read: device 0), as the CUDA driver would have
 * opened it.
 */
struct fproc {
	unsigned pid; /* host pid */
	unsigned long long used;
	unsigned dev;             /* the GPU */
	const struct fake_gi *gi; /* its MIG device's instance, or NULL */
};

static uint64_t own_pidns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* The pid in the innermost namespace of host process @pid, or 0. */
static unsigned inner_pid(unsigned pid)
{
	char path[64], line[256];
	unsigned last = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "NSpid:", 6) == 0) {
			for (char *p = line + 6, *end; *p; p = end) {
				unsigned long v = strtoul(p, &end, 10);

				if (end == p)
					break;
				last = (unsigned)v;
			}
			break;
		}
	fclose(f);
	return last;
}

/* The host pid of @pid in the PID namespace of inode @ns, 0 if none. */
static unsigned host_pid(unsigned pid, uint64_t ns)
{
	static uint64_t mine;
	struct dirent *e;
	unsigned found = 0;
	DIR *d;

	if (!mine)
		mine = own_pidns();
	if (!ns || ns == mine)
		return kill((pid_t)pid, 0) < 0 && errno == ESRCH ? 0 : pid;
	if (!(d = opendir("/proc")))
		return 0;
	while (!found && (e = readdir(d))) {
		char path[64];
		struct stat st;
		char *end;
		unsigned long n = strtoul(e->d_name, &end, 10);

		if (*end || !n)
			continue;
		snprintf(path, sizeof(path), "/proc/%lu/ns/pid", n);
		if (stat(path, &st) == 0 && (uint64_t)st.st_ino == ns &&
		    inner_pid((unsigned)n) == pid)
			found = (unsigned)n;
	}
	closedir(d);
	return found;
}

/* Where host process @pid runs, by its CUDA_VISIBLE_DEVICES. */
static void place(unsigned pid, struct fproc *fp)
{
	static const char key[] = "CUDA_VISIBLE_DEVICES=";
	char path[64], env[16384], want[96] = "", uuid[80];
	ssize_t n = 0;
	int fd;

	fp->dev = 0;
	fp->gi = NULL;
	snprintf(path, sizeof(path), "/proc/%u/environ", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, env, sizeof(env) - 1);
		close(fd);
	}
	if (n <= 0)
		return;
	env[n] = '\0';
	for (char *p = env; p < env + n; p += strlen(p) + 1)
		if (strncmp(p, key, sizeof(key) - 1) == 0) {
			snprintf(want, sizeof(want), "%.*s",
			         (int)strcspn(p + sizeof(key) - 1, ","),
			         p + sizeof(key) - 1);
			break;
		}
	if (want[0] >= '0' && want[0] <= '9') {
		unsigned long i = strtoul(want, NULL, 10);

		fp->dev = i < node.n ? (unsigned)i : 0;
		return;
	}
	for (unsigned i = 0; i < node.n; i++) {
		if (strcmp(want, node.dev[i].uuid) == 0) {
			fp->dev = i;
			return;
		}
		for (int j = 0; j < FAKE_GIS; j++) {
			const struct fake_gi *gi = &node.dev[i].gi[j];

			if (!gi->live || !gi->ci.live)
				continue;
			snprintf(uuid, sizeof(uuid), "MIG-fake-%04x-%04x-%04x",
			         i, gi->id, gi->ci.id);
			if (strcmp(want, uuid) == 0) {
				fp->dev = i;
				fp->gi = gi;
				return;
			}
		}
	}
}

/* Live registered processes, up to @cap into @out; how many there are. */
/* Field 22 of /proc/@pid/stat ("self" for 0): when it started, or 0. */
static uint64_t proc_start(unsigned pid)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	ssize_t n;
	int fd;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/stat");
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* After the command's closing parenthesis: field 3 onwards. */
	if (!(p = strrchr(buf, ')')))
		return 0;
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

static unsigned procs(struct fproc *out, unsigned cap)
{
	struct fake_gpu *g = state();
	unsigned n = 0;

	if (!g)
		return 0;
	ensure();
	for (int i = 0; i < FAKE_PROCS; i++) {
		int32_t p = atomic_load(&g->procs[i].pid);
		unsigned hp;

		uint64_t start;

		if (p <= 0 || !(hp = host_pid((unsigned)p,
		                              atomic_load(&g->procs[i].pidns))))
			continue;
		/* The pid and namespace of an ended process, given out again
		 * to one that has not registered (yet): not listed. */
		start = atomic_load(&g->procs[i].start);
		if (start && start != proc_start(hp))
			continue;
		if (n < cap) {
			out[n].pid = hp;
			out[n].used = atomic_load(&g->procs[i].used);
			place(hp, &out[n]);
		}
		n++;
	}
	return n;
}

static unsigned long long used_total(const struct fake_dev *d)
{
	struct fproc p[FAKE_PROCS];
	unsigned long long sum = 0;
	unsigned n = procs(p, FAKE_PROCS);

	for (unsigned i = 0; i < n && i < FAKE_PROCS; i++)
		if (&node.dev[p[i].dev] == d)
			sum += p[i].used;
	return sum;
}

/* What the processes in MIG device @gi's instance hold. */
static unsigned long long used_mig(const struct fake_gi *gi)
{
	struct fproc p[FAKE_PROCS];
	unsigned long long sum = 0;
	unsigned n = procs(p, FAKE_PROCS);

	for (unsigned i = 0; i < n && i < FAKE_PROCS; i++)
		if (p[i].gi == gi)
			sum += p[i].used;
	return sum;
}

/*
 * A GPU's memory, or, on a MIG device's handle, as the driver: its GPU
 * instance's memory (the profile's size) and what the processes in that
 * instance hold.
 */
API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
	struct fake_dev *d = dev_of(h);
	const struct fake_gi *gi = NULL;

	if (!m || (!d && !(gi = mig_of(h, &d))))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (is_lost(d))
		return NVML_ERROR_GPU_IS_LOST;
	if (gi) {
		m->total = gi->p->mib << 20;
		m->used = used_mig(gi);
		if (m->used > m->total)
			m->used = m->total;
		m->free = m->total - m->used;
		return NVML_SUCCESS;
	}
	m->total = capacity(d);
	m->used = used_total(d);
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
	struct fake_dev *d = dev_of(h);

	if (!m || !d)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (is_lost(d))
		return NVML_ERROR_GPU_IS_LOST;
	m->total = capacity(d);
	m->reserved = 5ULL << 20;
	m->used = used_total(d);
	m->free = m->total - m->used - m->reserved;
	return NVML_SUCCESS;
}

/*
 * A device's compute processes: a GPU's are all that run on it, in its
 * MIG devices too (the aggregate view a privileged caller gets); a MIG
 * device's are its own.  The count protocol is nvml.h's: *count is the
 * room in @infos; too little (or no buffer while there are processes) is
 * INSUFFICIENT_SIZE with *count set to what is needed.
 */
static nvmlReturn_t list(nvmlDevice_t h, unsigned int *count, void *infos,
                         size_t size)
{
	struct fproc all[FAKE_PROCS];
	struct fake_dev *d = dev_of(h);
	const struct fake_gi *gi = NULL;
	unsigned n_all, n = 0;

	if (!d && !(gi = mig_of(h, &d)))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	n_all = procs(all, FAKE_PROCS);
	if (n_all > FAKE_PROCS)
		n_all = FAKE_PROCS;
	for (unsigned i = 0; i < n_all; i++)
		if (&node.dev[all[i].dev] == d && (!gi || all[i].gi == gi))
			all[n++] = all[i];
	if (n > *count || (n && !infos)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++) {
		nvmlProcessInfo_t p = {
		    .pid = all[i].pid,
		    .usedGpuMemory = all[i].used,
		    .gpuInstanceId = all[i].gi ? all[i].gi->id : 0xFFFFFFFFu,
		    .computeInstanceId =
		        all[i].gi ? all[i].gi->ci.id : 0xFFFFFFFFu};
		memcpy((char *)infos + i * size, &p, size);
	}
	*count = n;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
	return list(d, count, infos, sizeof(*infos));
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	return list(d, count, infos, sizeof(*infos));
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	return list(d, count, infos, sizeof(*infos));
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	*count = 0;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	*count = 0;
	return NVML_SUCCESS;
}

/* ---- MIG ---------------------------------------------------------------- */

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current,
                                      unsigned int *pending)
{
	struct fake_dev *d = dev_of(h);

	if (!d || !current || !pending)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!node.mig)
		return NVML_ERROR_NOT_SUPPORTED;
	*current = d->mig_current;
	*pending = d->mig_pending;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t h, unsigned int mode,
                                      nvmlReturn_t *activation)
{
	struct fake_dev *d = dev_of(h);

	if (!d || !activation || mode > NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!node.mig)
		return NVML_ERROR_NOT_SUPPORTED;
	for (int j = 0; j < FAKE_GIS; j++)
		if (d->gi[j].live)
			return NVML_ERROR_IN_USE;
	{
		unsigned n = FAKE_PROCS;

		if (list(h, &n, NULL, sizeof(nvmlProcessInfo_t)) !=
		        NVML_SUCCESS ||
		    n > 0)
			return NVML_ERROR_IN_USE;
	}
	d->mig_pending = mode;
	if (node.mig_reset) {
		*activation = NVML_ERROR_RESET_REQUIRED;
	} else {
		d->mig_current = mode;
		*activation = NVML_SUCCESS;
	}
	return NVML_SUCCESS;
}

/* MIG calls need MIG mode on. */
static nvmlReturn_t mig_on(const struct fake_dev *d)
{
	if (!d)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!node.mig || d->mig_current != NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

static const struct gi_profile *profile_by_id(unsigned id)
{
	for (size_t i = 0; i < sizeof(gi_profiles) / sizeof(gi_profiles[0]);
	     i++)
		if (gi_profiles[i].id == id)
			return &gi_profiles[i];
	return NULL;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t h, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info)
{
	struct fake_dev *d = dev_of(h);
	nvmlReturn_t r;

	if ((r = mig_on(d)) != NVML_SUCCESS)
		return r;
	if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (size_t i = 0; i < sizeof(gi_profiles) / sizeof(gi_profiles[0]);
	     i++) {
		const struct gi_profile *p = &gi_profiles[i];

		if (p->cnst != profile)
			continue;
		memset(info, 0, sizeof(*info));
		info->id = p->id;
		info->sliceCount = p->slices;
		info->instanceCount = p->count;
		info->multiprocessorCount = p->sms;
		info->copyEngineCount = p->slices;
		info->memorySizeMB = p->mib;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_SUPPORTED;
}

API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t h, unsigned int profileId,
    nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
	struct fake_dev *d = dev_of(h);
	const struct gi_profile *p = profile_by_id(profileId);
	unsigned n = 0;
	nvmlReturn_t r;

	if ((r = mig_on(d)) != NVML_SUCCESS)
		return r;
	if (!p || !count)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned s = 0; s < 8; s++)
		n += (p->starts >> s) & 1;
	if (!placements) {
		*count = n;
		return NVML_SUCCESS;
	}
	if (*count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	n = 0;
	for (unsigned s = 0; s < 8; s++)
		if ((p->starts >> s) & 1) {
			placements[n].start = s;
			placements[n].size = p->mem_slices;
			n++;
		}
	*count = n;
	return NVML_SUCCESS;
}

static bool overlap(unsigned a, unsigned alen, unsigned b, unsigned blen)
{
	return a < b + blen && b < a + alen;
}

API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t h, unsigned int profileId,
    const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *ret)
{
	struct fake_dev *d = dev_of(h);
	const struct gi_profile *p = profile_by_id(profileId);
	struct fake_gi *slot = NULL;
	unsigned same = 0, id = 1, s;
	nvmlReturn_t r;

	if ((r = mig_on(d)) != NVML_SUCCESS)
		return r;
	if (!p || !placement || !ret)
		return NVML_ERROR_INVALID_ARGUMENT;
	s = placement->start;
	if (s >= 8 || !((p->starts >> s) & 1) ||
	    placement->size != p->mem_slices)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int j = 0; j < FAKE_GIS; j++) {
		const struct fake_gi *gi = &d->gi[j];

		if (!gi->live) {
			if (!slot)
				slot = &d->gi[j];
			continue;
		}
		same += gi->p == p;
		if (overlap(s, p->mem_slices, gi->start, gi->p->mem_slices) ||
		    overlap(s, p->slices, gi->start, gi->p->slices))
			return NVML_ERROR_INSUFFICIENT_RESOURCES;
	}
	if (!slot || same >= p->count)
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	/* The lowest free instance ID, from 1. */
	for (int j = 0; j < FAKE_GIS; j++)
		if (d->gi[j].live && d->gi[j].id == id) {
			id++;
			j = -1;
		}
	memset(slot, 0, sizeof(*slot));
	slot->live = true;
	slot->id = id;
	slot->start = s;
	slot->p = p;
	*ret = (nvmlGpuInstance_t)slot;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t h,
                                        nvmlGpuInstanceInfo_t *info)
{
	struct fake_dev *d;
	struct fake_gi *gi = gi_of(h, &d);

	if (!gi || !info)
		return NVML_ERROR_INVALID_ARGUMENT;
	info->device = (nvmlDevice_t)d;
	info->id = gi->id;
	info->profileId = gi->p->id;
	info->placement.start = gi->start;
	info->placement.size = gi->p->mem_slices;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t h,
                                           unsigned int profileId,
                                           nvmlGpuInstance_t *gis,
                                           unsigned int *count)
{
	struct fake_dev *d = dev_of(h);
	const struct gi_profile *p = profile_by_id(profileId);
	unsigned n = 0;
	nvmlReturn_t r;

	if ((r = mig_on(d)) != NVML_SUCCESS)
		return r;
	/* The buffer holds the profile's instanceCount, as nvml.h asks. */
	if (!p || !gis || !count)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int j = 0; j < FAKE_GIS; j++)
		if (d->gi[j].live && d->gi[j].p == p)
			gis[n++] = (nvmlGpuInstance_t)&d->gi[j];
	*count = n;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t h, unsigned int id,
                                              nvmlGpuInstance_t *ret)
{
	struct fake_dev *d = dev_of(h);
	nvmlReturn_t r;

	if ((r = mig_on(d)) != NVML_SUCCESS)
		return r;
	if (!ret)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int j = 0; j < FAKE_GIS; j++)
		if (d->gi[j].live && d->gi[j].id == id) {
			*ret = (nvmlGpuInstance_t)&d->gi[j];
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t h)
{
	struct fake_dev *d;
	struct fake_gi *gi = gi_of(h, &d);

	if (!gi)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (gi->ci.live)
		return NVML_ERROR_IN_USE;
	gi->live = false;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t h, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
	struct fake_dev *d;
	struct fake_gi *gi = gi_of(h, &d);

	if (!gi || !info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
	    engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (profile >= sizeof(ci_slices) / sizeof(ci_slices[0]) ||
	    ci_slices[profile] > gi->p->slices)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(info, 0, sizeof(*info));
	info->id = profile;
	info->sliceCount = ci_slices[profile];
	info->instanceCount = gi->p->slices / ci_slices[profile];
	info->multiprocessorCount =
	    gi->p->sms * ci_slices[profile] / gi->p->slices;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t h, unsigned int profileId, nvmlComputeInstance_t *ret)
{
	struct fake_dev *d;
	struct fake_gi *gi = gi_of(h, &d);

	if (!gi || !ret ||
	    profileId >= sizeof(ci_slices) / sizeof(ci_slices[0]))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (ci_slices[profileId] > gi->p->slices)
		return NVML_ERROR_NOT_SUPPORTED;
	if (gi->ci.live)
		return NVML_ERROR_INSUFFICIENT_RESOURCES; /* one per GI here */
	gi->ci.live = true;
	gi->ci.id = 0;
	gi->ci.profile = profileId;
	*ret = (nvmlComputeInstance_t)&gi->ci;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(
    nvmlGpuInstance_t h, unsigned int id, nvmlComputeInstance_t *ret)
{
	struct fake_dev *d;
	struct fake_gi *gi = gi_of(h, &d);

	if (!gi || !ret)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!gi->ci.live || gi->ci.id != id)
		return NVML_ERROR_NOT_FOUND;
	*ret = (nvmlComputeInstance_t)&gi->ci;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t h,
                                               nvmlComputeInstanceInfo_t *info)
{
	struct fake_dev *d;
	struct fake_gi *gi = ci_of(h, &d);

	if (!gi || !info)
		return NVML_ERROR_INVALID_ARGUMENT;
	info->device = (nvmlDevice_t)d;
	info->gpuInstance = (nvmlGpuInstance_t)gi;
	info->id = gi->ci.id;
	info->profileId = gi->ci.profile;
	info->placement.start = 0;
	info->placement.size = ci_slices[gi->ci.profile];
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t h)
{
	struct fake_dev *d;
	struct fake_gi *gi = ci_of(h, &d);

	if (!gi)
		return NVML_ERROR_INVALID_ARGUMENT;
	gi->ci.live = false;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h,
                                                unsigned int *count)
{
	struct fake_dev *d = dev_of(h);

	if (!d || !count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = node.mig ? FAKE_GIS : 0;
	return NVML_SUCCESS;
}

/* The MIG devices of a GPU: its live compute instances, in slot order. */
API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h,
                                                     unsigned int index,
                                                     nvmlDevice_t *ret)
{
	struct fake_dev *d = dev_of(h);
	unsigned n = 0;
	nvmlReturn_t r;

	if ((r = mig_on(d)) != NVML_SUCCESS)
		return r;
	if (!ret || index >= FAKE_GIS)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int j = 0; j < FAKE_GIS; j++)
		if (d->gi[j].live && d->gi[j].ci.live && n++ == index) {
			*ret = (nvmlDevice_t)&d->gi[j].ci.mig;
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id)
{
	struct fake_dev *d;
	struct fake_gi *gi = mig_of(h, &d);

	if (!id)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!gi)
		return dev_of(h) ? NVML_ERROR_NOT_SUPPORTED
		                 : NVML_ERROR_INVALID_ARGUMENT;
	*id = gi->id;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h,
                                                unsigned int *id)
{
	struct fake_dev *d;
	struct fake_gi *gi = mig_of(h, &d);

	if (!id)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!gi)
		return dev_of(h) ? NVML_ERROR_NOT_SUPPORTED
		                 : NVML_ERROR_INVALID_ARGUMENT;
	*id = gi->ci.id;
	return NVML_SUCCESS;
}

/* ---- telemetry ------------------------------------------------------------
 *
 * Utilization, temperature, power and clocks, what a GPU exporter reads.
 * Each value comes from an environment variable read at every call, a
 * comma-separated list by device index (the last entry repeats for the
 * devices after it), or a default that differs by device so that a
 * reader mixing up devices is caught:
 *
 *   FAKE_NVML_UTIL       GPU utilization, percent (37 + 11 * i) % 101
 *   FAKE_NVML_MEM_UTIL   memory utilization, percent (13 + 7 * i) % 101
 *   FAKE_NVML_TEMP       GPU temperature, degrees C (41 + i)
 *   FAKE_NVML_POWER_MW   power draw, milliwatts (250000 + 1500 * i)
 *   FAKE_NVML_SM_CLOCK   SM clock, MHz (1980 - 15 * i)
 *
 * As the real library: utilization is NOT_SUPPORTED on a GPU in MIG mode;
 * each call needs nvmlInit (UNINITIALIZED), a GPU's
 * handle (a MIG device's is NOT_SUPPORTED for these queries, any other
 * INVALID_ARGUMENT), a non-NULL output (INVALID_ARGUMENT), a known sensor
 * or clock type (INVALID_ARGUMENT), and a GPU on the bus (GPU_IS_LOST).
 */
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_TEMPERATURE_GPU     0
#define NVML_CLOCK_COUNT         4 /* graphics, SM, memory, video */
#define NVML_CLOCK_SM            1

typedef struct {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

static unsigned telemetry(const char *env, unsigned i, unsigned def)
{
	const char *v = getenv(env);
	unsigned long long x = def;

	if (!v || !*v)
		return def;
	for (unsigned k = 0;; k++) {
		char *end;

		x = strtoull(v, &end, 0);
		if (end == v)
			return def;
		if (k == i || *end != ',')
			return (unsigned)x;
		v = end + 1;
	}
}

/* The GPU @h names for a telemetry query, or the error to return. */
static nvmlReturn_t telemetry_dev(nvmlDevice_t h, const void *out,
                                  unsigned *ret_i)
{
	struct fake_dev *d;

	if (node.refs == 0)
		return NVML_ERROR_UNINITIALIZED;
	if (!(d = dev_of(h)))
		return mig_of(h, &d) ? NVML_ERROR_NOT_SUPPORTED
		                     : NVML_ERROR_INVALID_ARGUMENT;
	if (!out)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (is_lost(d))
		return NVML_ERROR_GPU_IS_LOST;
	*ret_i = (unsigned)(d - node.dev);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h,
                                               nvmlUtilization_t *u)
{
	unsigned i;
	nvmlReturn_t r = telemetry_dev(h, u, &i);

	if (r != NVML_SUCCESS)
		return r;
	/* As the driver: no utilization of a GPU in MIG mode. */
	if (node.dev[i].mig_current == NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_NOT_SUPPORTED;
	u->gpu = telemetry("FAKE_NVML_UTIL", i, (37 + 11 * i) % 101);
	u->memory = telemetry("FAKE_NVML_MEM_UTIL", i, (13 + 7 * i) % 101);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, unsigned int sensor,
                                          unsigned int *temp)
{
	unsigned i;
	nvmlReturn_t r = telemetry_dev(h, temp, &i);

	if (r != NVML_SUCCESS)
		return r;
	if (sensor != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	*temp = telemetry("FAKE_NVML_TEMP", i, 41 + i);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw)
{
	unsigned i;
	nvmlReturn_t r = telemetry_dev(h, mw, &i);

	if (r != NVML_SUCCESS)
		return r;
	*mw = telemetry("FAKE_NVML_POWER_MW", i, 250000 + 1500 * i);
	return NVML_SUCCESS;
}

/* Only the SM clock is modelled; the other types are NOT_SUPPORTED. */
API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, unsigned int type,
                                        unsigned int *mhz)
{
	unsigned i;
	nvmlReturn_t r = telemetry_dev(h, mhz, &i);

	if (r != NVML_SUCCESS)
		return r;
	if (type >= NVML_CLOCK_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (type != NVML_CLOCK_SM)
		return NVML_ERROR_NOT_SUPPORTED;
	*mhz = telemetry("FAKE_NVML_SM_CLOCK", i, 1980 - 15 * i);
	return NVML_SUCCESS;
}
