/*
 * region.h - the slice's shared region: the one piece of memory every
 * process of a slice maps, through which the node agent sets the slice's
 * limits and the shims of all its processes share one VRAM account and one
 * compute token bucket.
 *
 * The agent creates one region file per slice (cnl_region_create), passes
 * its path to the slice's processes in CNLAB_REGION, and may change the
 * quota or the share at any time (cnl_region_set_quota/_share): the next
 * allocation or launch sees the new value.  The layout below is the
 * contract between the agent and every shim version that maps the file;
 * any incompatible change bumps CNL_REGION_VERSION and a shim refuses a
 * region whose magic or version it does not know.
 *
 * Layout (version 1, x86-64, little-endian, 64-byte aligned members):
 *
 *     +-----------------------------+ 0
 *     | magic "CNLREGN1", version,  |
 *     | size, project, board path,  |  written once by cnl_region_create
 *     | IPC registry directory      |
 *     +-----------------------------+
 *     | quota, share_pct,           |  written by the agent at any time
 *     | ctx_reserve, burst_ns       |  (single atomic stores)
 *     +-----------------------------+
 *     | lock (robust, pshared)      |  guards used/peak of the region and of
 *     | used, peak, counters        |  every process slot
 *     +-----------------------------+
 *     | token bucket                |  atomics only (the launch hot path)
 *     +-----------------------------+
 *     | procs[64]: state, pid,      |  one per process of the slice
 *     | used, peak, busy, launches  |
 *     +-----------------------------+
 *
 * Invariants:
 *  1. region.used == sum of procs[i].used over live slots, whenever the lock
 *     is free.  A process killed while holding the lock leaves the mutex
 *     EOWNERDEAD; the next locker recomputes region.used from the slots,
 *     which is exact because each slot field is one atomic store.
 *  2. A slot is owned by the process that holds the POSIX record lock on
 *     byte CNL_REGION_LOCK_BASE + i of the region file.  The kernel drops
 *     that lock when the process dies, however it dies, so "lock obtainable"
 *     means "owner dead": no PID is ever compared, and PID reuse cannot make
 *     a dead process look alive or a live one dead.
 *  3. Reaping a dead slot takes its byte lock first, so a slot is reaped at
 *     most once and never while a new owner is claiming it.
 *  4. Quota is checked and reserved in one critical section, before the
 *     driver is called; a failed driver call gives the reservation back.
 *     There is no check-then-allocate window between threads or processes.
 *
 * Process start-up maps the file and claims a slot: a handful of system
 * calls, no node-wide lock.
 */
#ifndef CNL_SHIM_REGION_H
#define CNL_SHIM_REGION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define CNL_REGION_MAGIC       0x314e4745524c4e43ULL /* "CNLREGN1" */
#define CNL_BOARD_MAGIC        0x3144524f424c4e43ULL /* "CNLBORD1" */
#define CNL_REGION_VERSION     1
#define CNL_REGION_PROCS       64
#define CNL_REGION_PROJECT_MAX 64
#define CNL_REGION_PATH_MAX    128
/* Byte offset of slot 0's ownership lock (beyond the data, never mapped). */
#define CNL_REGION_LOCK_BASE (1 << 20)
/* Default depth of the compute token bucket: 20 ms of GPU time. */
#define CNL_REGION_BURST_NS 20000000ULL

enum cnl_region_proc_state {
	CNL_PROC_FREE = 0,
	CNL_PROC_LIVE = 1,
};

/* One process of the slice.  used/peak change under the region lock. */
struct cnl_region_proc {
	_Atomic uint32_t state;       /* enum cnl_region_proc_state */
	_Atomic uint32_t gen;         /* bumped on every claim and reap */
	_Atomic int32_t pid;          /* in the slice's PID namespace */
	_Atomic int32_t host_pid;     /* outermost NSpid (what NVML shows) */
	_Atomic uint64_t used;        /* bytes charged to this process */
	_Atomic uint64_t peak;        /* highest used */
	_Atomic uint64_t busy_ns;     /* kernel time measured by the shim */
	_Atomic uint64_t launches;    /* kernel and graph launches */
	_Atomic uint64_t throttle_ns; /* time launches were held back */
	_Atomic uint64_t oom;         /* allocations refused over quota */
} __attribute__((aligned(64)));

/*
 * A time-based token bucket in nanoseconds of GPU time.  tokens may go
 * negative (work is charged after it ran); stamp is the CLOCK_MONOTONIC
 * time up to which refill has been credited.
 */
struct cnl_bucket {
	_Atomic int64_t tokens;
	_Atomic uint64_t stamp;
} __attribute__((aligned(64)));

struct cnl_region {
	uint64_t magic;
	uint32_t version;
	uint32_t size; /* sizeof(struct cnl_region) of the creator */
	char project[CNL_REGION_PROJECT_MAX];
	char board[CNL_REGION_PATH_MAX];   /* GPU board path; "" for none */
	char ipc_dir[CNL_REGION_PATH_MAX]; /* IPC registry; "" = deny all */

	/* Limits, written by the agent at any time. */
	_Atomic uint64_t quota;       /* bytes; 0 = no quota */
	_Atomic uint32_t share_pct;   /* 1..100; 0 = not throttled */
	_Atomic uint32_t board_slot;  /* this slice's row on the board */
	_Atomic uint64_t ctx_reserve; /* bytes charged per process context */
	_Atomic uint64_t burst_ns;    /* token bucket depth */

	/* Accounting, under lock (invariant 1). */
	pthread_mutex_t lock __attribute__((aligned(64)));
	_Atomic uint64_t used;
	_Atomic uint64_t peak;
	_Atomic uint64_t oom;     /* allocations refused over quota */
	_Atomic uint64_t reaped;  /* dead processes whose memory came back */
	_Atomic uint64_t repairs; /* locks recovered from a dead owner */

	struct cnl_bucket bucket;
	struct cnl_region_proc procs[CNL_REGION_PROCS];
};

/*
 * The GPU board: one per physical GPU (or MIG instance) in block mode,
 * shared by every slice on it, each slice in the row the agent gave it
 * (cnl_region_opts.board_slot).  A slice marks its row active whenever it
 * has work to launch; the compute rate of a slice is its share scaled by
 * 100 / (sum of the shares of the active slices), so the time of idle
 * slices (and of unallocated blocks) goes to the busy ones in proportion
 * to their shares (work conservation), and busy slices split the GPU
 * exactly by share.  Without a board a slice is capped at its share.
 */
#define CNL_BOARD_SLICES    100
#define CNL_BOARD_ACTIVE_NS 50000000ULL /* active = launched in last 50 ms */
struct cnl_board_slice {
	_Atomic uint32_t share_pct;
	_Atomic uint64_t active_ns; /* CLOCK_MONOTONIC of the last demand */
} __attribute__((aligned(64)));

struct cnl_board {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	struct cnl_board_slice slices[CNL_BOARD_SLICES];
};

/* A mapped region and the descriptor that carries its slot locks. */
struct cnl_region_handle {
	struct cnl_region *r;
	int fd;
};

/* Options of cnl_region_create beyond quota, share and project. */
struct cnl_region_opts {
	const char *board;    /* NULL or "" for none */
	const char *ipc_dir;  /* NULL or "" for "deny all cross-slice IPC" */
	uint64_t ctx_reserve; /* bytes */
	uint64_t burst_ns;    /* 0 for CNL_REGION_BURST_NS */
	unsigned board_slot;  /* row on the board, < CNL_BOARD_SLICES */
};

/*
 * cnl_region_create - create (or atomically replace) the region file at
 * path: written to a temporary file, then renamed.  quota 0 means no VRAM
 * quota; share_pct 0 means no compute throttling.  opts may be NULL.
 * Returns 0 or a negative errno.
 */
int cnl_region_create(const char *path, uint64_t quota, unsigned share_pct,
                      const char *project, const struct cnl_region_opts *opts);

/* cnl_board_create - create the GPU board file at path. */
int cnl_board_create(const char *path);

/*
 * cnl_region_map - map an existing region read-write; checks magic,
 * version and size.  Returns 0, -EPROTO for a foreign or newer layout, or
 * a negative errno.  ret is untouched on failure.
 */
int cnl_region_map(const char *path, struct cnl_region_handle *ret);
void cnl_region_unmap(struct cnl_region_handle *h);

/* cnl_board_map - map a board read-write; NULL on any failure. */
struct cnl_board *cnl_board_map(const char *path);

/* In-flight limit changes (agent side): one atomic store each. */
int cnl_region_set_quota(struct cnl_region *r, uint64_t bytes);
int cnl_region_set_share(struct cnl_region *r, unsigned share_pct);

/*
 * cnl_region_attach - claim a process slot for the calling process (first
 * reaping a dead owner's leftovers if the slot had one).  Returns the slot
 * index or -EBUSY when all CNL_REGION_PROCS slots are held by live
 * processes.
 */
int cnl_region_attach(struct cnl_region_handle *h);

/* cnl_region_detach - give the slot and everything charged to it back. */
void cnl_region_detach(struct cnl_region_handle *h, int slot);

/*
 * cnl_region_reserve - charge bytes to slot if the quota allows.  Returns 0
 * or -ENOMEM (nothing charged).  force charges even over quota (memory the
 * driver already handed out, such as a pool growing by its granularity).
 */
int cnl_region_reserve(struct cnl_region *r, int slot, uint64_t bytes,
                       int force);
/* cnl_region_unreserve - give bytes back (clamped at what slot holds). */
void cnl_region_unreserve(struct cnl_region *r, int slot, uint64_t bytes);

/*
 * cnl_region_reap - return the memory of every process of the slice that
 * died, except own_slot (pass -1 from a process that holds none).
 * Returns the number of slots reaped.
 */
int cnl_region_reap(struct cnl_region_handle *h, int own_slot);

/* A consistent snapshot of the accounting, taken under the lock. */
struct cnl_region_stat {
	uint64_t quota;
	uint64_t used;
	uint64_t peak;
	uint64_t oom;
	uint64_t reaped;
	uint64_t repairs;
	unsigned nprocs;
	struct {
		int slot;
		pid_t pid;
		pid_t host_pid;
		uint64_t used;
		uint64_t peak;
		uint64_t busy_ns;
		uint64_t launches;
	} procs[CNL_REGION_PROCS];
};
int cnl_region_stat(struct cnl_region *r, struct cnl_region_stat *ret);

/*
 * cnl_board_rate - the compute rate (percent of the GPU) of the slice in
 * row slot with share share_pct at time now_ns: its share scaled up by the
 * idle shares of the other rows.  Marks the row active.
 */
unsigned cnl_board_rate(struct cnl_board *b, unsigned slot, unsigned share_pct,
                        uint64_t now_ns);

/* Token bucket primitives (lock-free; shared with the shim's throttle). */
void cnl_bucket_refill(struct cnl_bucket *b, uint64_t now_ns, unsigned pct,
                       uint64_t burst_ns);
void cnl_bucket_charge(struct cnl_bucket *b, int64_t ns, uint64_t burst_ns);

#endif /* CNL_SHIM_REGION_H */
