/*
 * gpu_audit.h - the node agent's GPU memory audit: what the driver itself
 * says each process holds, against each slice's VRAM quota.
 *
 * The shim keeps a slice inside its quota from within the tenant's own
 * processes; a tenant that defeats it (runs without it, or rewrites its
 * region) is still seen by the driver.  So every gpu_audit_interval
 * (1 s by default) the agent reads the per-process device memory of every
 * GPU through NVML (nvmlDeviceGetComputeRunningProcesses_v3, and on a GPU
 * in MIG mode each MIG device's list: gpu.h, cnl_gpus_procs), maps each
 * host pid to a workload by the workload's cgroup (cgroup.procs of the
 * cgroup the agent made for it: the kernel's record, which no tenant
 * writes), sums each slice's processes, and compares the sum with the
 * agent's own record of the slice's quota (struct wk, from the assignment;
 * never the tenant-writable region file).  A slice over its quota by more
 * than one granule (2 MiB, the driver's page) loses its largest holders,
 * largest first, by SIGKILL until what is left is within its quota
 * (cnl_gpu_audit_pick).  Each kill is logged, reported to cnlabd
 * (POST /v1/nodes/{id}/gpu-kills, one audit record each) and makes the
 * workload end failed with the reason ("killed: used 6 GiB of GPU
 * memory, quota 4 GiB (GPU memory audit, pid 1234)").  A workload without
 * a GPU (bare isolation leaves the device nodes reachable) holds a quota
 * of 0.  A process on a GPU that belongs to no workload of this agent is
 * the operator's: logged once, never killed.  Whole-GPU slices (no
 * quota) are not audited.
 *
 * The audit runs on its own thread with its own NVML handle and its own
 * client: it takes the table's lock only to copy the slices out (and to
 * note a kill), reads no region and takes no tenant-writable lock, so a
 * tenant cannot stall it and it never stalls the agent's other work.
 */
#ifndef CNL_AGENT_GPU_AUDIT_H
#define CNL_AGENT_GPU_AUDIT_H

#include <stdbool.h>
#include <stdint.h>

/* The tolerance over a quota: one driver page. */
#define CNL_GPU_AUDIT_GRANULE (2ULL << 20)
/* The quota of a slice the audit does not hold to one (whole GPUs). */
#define CNL_GPU_AUDIT_NO_QUOTA UINT64_MAX

struct cnl_audit_proc {
	int pid;
	uint64_t used; /* bytes; CNL_GPU_USED_UNKNOWN (gpu.h): not told */
};

/*
 * cnl_gpu_audit_pick - which of the @n processes of one slice to kill.
 * None while the slice holds at most @quota + @granule in all (a @quota
 * of CNL_GPU_AUDIT_NO_QUOTA: never any; 0, a workload without a GPU:
 * anything past the granule); otherwise its largest holders, largest
 * first (the lower pid first between equals), until what the others hold
 * is at most @quota.  A process whose usage is unknown counts as 0 and is
 * never picked.  Their indexes into @procs, in kill order, into @ret_idx
 * (room for @n); returns how many.  Pure.
 */
int cnl_gpu_audit_pick(const struct cnl_audit_proc *procs, int n,
                       uint64_t quota, uint64_t granule, int *ret_idx);

/*
 * cnl_gpu_audit_shrunk - whether a slice shrinking in flight to
 * @shrink_to bytes may be held to the smaller quota: its @n processes
 * hold at most that in all, every one of them told (a usage NVML cannot
 * tell keeps the larger quota; a shrink refuses new allocations, the
 * audit must not kill for it).  Pure.
 */
bool cnl_gpu_audit_shrunk(const struct cnl_audit_proc *procs, int n,
                          uint64_t shrink_to);

/*
 * cnl_gpu_audit_reason - the words a user reads for a workload killed by
 * the audit: "killed: used 6 GiB of GPU memory, quota 4 GiB (GPU memory
 * audit, pid 1234)" into @buf ("..., without a GPU slice (...)" for a
 * @quota of 0).
 */
void cnl_gpu_audit_reason(uint64_t used, uint64_t quota, int pid, char *buf,
                          size_t len);

#endif /* CNL_AGENT_GPU_AUDIT_H */
