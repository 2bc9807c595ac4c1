/*
 * fake_gpu.h - the state of the fake GPU that tests/fakes/libcuda.so.1 and
 * libnvidia-ml.so.1 model, shared by every process of a test through the
 * file named in CNL_FAKE_GPU (process-local when unset).
 *
 * The fake GPU executes all work of all processes in submission order, one
 * item at a time: a kernel of duration d submitted at time t starts at
 * max(t, free_at) and ends d later (free_at moves there).  An event records
 * the time the GPU reaches it.  Time is CLOCK_MONOTONIC nanoseconds, so the
 * shim's wall-clock token bucket and the fake's GPU time agree.  Each
 * process adds the durations of its kernels to busy_ns[tag], tag from
 * CNL_FAKE_TAG: that ledger is the ground truth of the compute-share tests,
 * independent of the shim's own measurement.
 *
 * MIG: a process started with CNL_FAKE_MIG=<c>g@<s> (e.g. "1g@0") sees
 * a MIG instance of c of the GPU's 7 compute slices starting at slot s,
 * as a process given that instance's UUID in CUDA_VISIBLE_DEVICES does.
 * Each instance has its own timeline (mig_free_at[s]): its work never
 * waits for another instance's, and runs at c/7 of the whole GPU's speed,
 * so a kernel of duration d occupies the instance for d * 7 / c.  busy_ns
 * then counts time of the instance (the device the process sees), and
 * mig_busy_ns[s] the instance's total.  A malformed value (c not 1..7,
 * s + c past 7) leaves the process without a device, as an unknown MIG
 * UUID does: cuInit fails with CUDA_ERROR_NO_DEVICE.
 */
#ifndef CNL_FAKE_GPU_H
#define CNL_FAKE_GPU_H

#include <stdatomic.h>
#include <stdint.h>

#define FAKE_GPU_MAGIC   0x5550474b41464c43ULL /* "CLFAKGPU" */
#define FAKE_TAGS        16
#define FAKE_PROCS       64
#define FAKE_DEFAULT_MEM (16ULL << 30)
/* The page the driver reserves device memory in (CNL_FAKE_PAGE). */
#define FAKE_PAGE       (2ULL << 20)
#define FAKE_MIG_SLICES 7 /* compute slices of a MIG-capable GPU */

struct fake_proc {
	_Atomic int32_t pid;   /* in the process's own PID namespace */
	_Atomic uint64_t used; /* device memory the process holds, in the
	                          whole pages the driver reserved */
	/* The inode of that PID namespace (0: unknown, the reader's own):
	 * the fake NVML turns pid into a host pid with it, as the real
	 * driver reports host pids whatever namespace a process runs in. */
	_Atomic uint64_t pidns;
	/* When the process started (field 22 of /proc/PID/stat, ticks since
	 * boot, the same seen from any namespace): a slot whose pid and
	 * namespace inode the kernel gave out again, to a process that has
	 * not registered yet, is an ended process's, which the real driver
	 * never lists. */
	_Atomic uint64_t start;
};

struct fake_gpu {
	_Atomic uint64_t magic;
	_Atomic uint64_t free_at; /* when the GPU finishes what it has */
	_Atomic uint64_t kernels;
	_Atomic uint64_t busy_ns[FAKE_TAGS];
	struct fake_proc procs[FAKE_PROCS];
	/* MIG instances, by start slot: when each finishes what it has, and
	 * the time it has been busy. */
	_Atomic uint64_t mig_free_at[FAKE_MIG_SLICES];
	_Atomic uint64_t mig_busy_ns[FAKE_MIG_SLICES];
};

/* Exported by libcuda.so.1 (fake) for test programs and the benchmark. */
struct fake_gpu *cnlfake_gpu(void);
/* The fake's own entry point of a driver function, bypassing any hook. */
void *cnlfake_sym(const char *name);
/* Device memory the calling process holds, as the fake driver counts it. */
uint64_t cnlfake_used(void);

#endif /* CNL_FAKE_GPU_H */
