/*
 * region.h - the slice's shared region: the memory every process of a
 * slice maps, through which the node agent sets the slice's limits and the
 * shims of all its processes share one VRAM account and one compute token
 * bucket.
 *
 * The region is two files (version 2):
 *
 *   PATH        the limits: created by the agent (root), mode 0644, mapped
 *               read-only by the shim and bind-mounted read-only into a
 *               container.  A tenant cannot raise its quota or share,
 *               truncate the file or replace it (the regions directory is
 *               the agent's).  CNLAB_REGION names this file.
 *   PATH.acct   the accounting: process slots, token bucket, counters;
 *               writable by the slice (the agent hands it to the tenant's
 *               uid, mode 0600).  A tenant can write anything there at any
 *               time, so every reader treats it as hostile (invariant 5).
 *
 * cnl_region_map maps the two files back to back into one reservation of
 * address space, so that struct cnl_region below is one object: its first
 * page is the limits file, the rest the accounting file.  The agent (and
 * cnlab-region) map the limits page read-write, the shim read-only (a
 * store to it faults).  The agent may change the quota or the share at any
 * time (cnl_region_set_quota/_share): the next allocation or launch sees
 * the new value.  The layout is the contract between the agent and every
 * shim version that maps the files; an incompatible change bumps
 * CNL_REGION_VERSION and a shim refuses a region whose magic, version or
 * size it does not know.
 *
 * Layout (version 2, x86-64, little-endian, 4 KiB pages):
 *
 *     +-----------------------------+ 0            PATH (read-only to the
 *     | magic "CNLREGN1", version,  |              slice)
 *     | size, project, board path,  |  written once by cnl_region_create
 *     | IPC registry directory      |
 *     | quota, share_pct,           |  written by the agent at any time
 *     | ctx_reserve, burst_ns       |  (single atomic stores)
 *     +-----------------------------+ 4096         PATH.acct (writable by
 *     | magic "CNLACCT2", version   |              the slice)
 *     | (informative), live slot    |
 *     | mask, peak,                 |
 *     | counters                    |
 *     +-----------------------------+
 *     | token bucket                |  atomics only (the launch hot path)
 *     +-----------------------------+
 *     | procs[64]: state, pid,      |  one per process of the slice
 *     | used, peak, busy, launches  |
 *     +-----------------------------+
 *
 * Accounting is lock-free: there is no lock any process holds while it
 * counts, so a process stopped or killed anywhere blocks no other.
 *
 * Invariants:
 *  1. A slot's used is the only truth about what its process holds; the
 *     slice's use is the sum of used over the slots in the live mask
 *     (saturating).  A reservation adds to its own slot first, then sums
 *     (all sequentially consistent); if the sum exceeds the quota it takes
 *     the bytes back and fails.  Of two racing reservers at least one sees
 *     the other's add (store-buffer litmus under seq_cst), so the kept
 *     reservations never exceed the quota; a racer may fail because of a
 *     reservation the other then takes back (conservative, never over).
 *  2. A slot is owned by the process that holds the POSIX record lock on
 *     byte CNL_REGION_LOCK_BASE + i of the accounting file.  The kernel
 *     drops that lock when the process dies, however it dies, so "lock
 *     obtainable" means "owner dead": no PID is ever compared, and PID
 *     reuse cannot make a dead process look alive or a live one dead.
 *  3. Reaping a dead slot takes its byte lock first (F_SETLK, never
 *     waiting), so a slot is reaped at most once and never while a new
 *     owner is claiming it.  Reaping needs no agent: reserve and the
 *     memory information path (cnl_region_used) of every process reap at
 *     most every CNL_REGION_REAP_NS (one coarse clock read otherwise), so
 *     a dead process leaves the accounting within about half a second;
 *     cnl_region_stat counts only slots whose lock is held (F_GETLK), so
 *     the dead leave the agent's view at once.
 *  4. Quota is checked and reserved before the driver is called; a failed
 *     driver call gives the reservation back.  There is no
 *     check-then-allocate window between threads or processes.
 *  5. Nothing waits on a value a tenant controls: every loop over the
 *     accounting file is bounded (the 64 slots; compare-and-swap retries
 *     capped at CNL_REGION_SPINS), sums saturate, and a slot is counted
 *     only through its own used.  Garbage there can make the slice refuse
 *     its own allocations, or let a tampering process under-report its own
 *     use, but a new process always counts its own slot and never gets
 *     more than the quota (which garbage cannot change); the agent's NVML
 *     audit of real per-process use catches a process that lies.
 *
 * Process start-up maps the two files and claims a slot: a handful of
 * system calls, no node-wide lock, no file scan.
 */
#ifndef CNL_SHIM_REGION_H
#define CNL_SHIM_REGION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CNL_REGION_MAGIC       0x314e4745524c4e43ULL /* "CNLREGN1" */
#define CNL_REGION_ACCT_MAGIC  0x32544343414c4e43ULL /* "CNLACCT2" */
#define CNL_BOARD_MAGIC        0x3144524f424c4e43ULL /* "CNLBORD1" */
#define CNL_REGION_VERSION     2
#define CNL_BOARD_VERSION      1
#define CNL_REGION_PROCS       64
#define CNL_REGION_PROJECT_MAX 64
#define CNL_REGION_PATH_MAX    128
/* Size of the limits page (the limits file). */
#define CNL_REGION_LIMITS_SIZE 4096
/* Suffix of the accounting file beside the limits file. */
#define CNL_REGION_ACCT_SUFFIX ".acct"
/* Byte offset of slot 0's ownership lock in the accounting file (beyond
 * the data, never mapped). */
#define CNL_REGION_LOCK_BASE (1 << 20)
/* Default depth of the compute token bucket: 20 ms of GPU time. */
#define CNL_REGION_BURST_NS 20000000ULL
/* Dead processes are looked for at most this often by each process. */
#define CNL_REGION_REAP_NS 500000000ULL
/* Most compare-and-swap retries of any loop over the accounting file. */
#define CNL_REGION_SPINS 64

enum cnl_region_proc_state {
	CNL_PROC_FREE = 0,
	CNL_PROC_LIVE = 1,
};

/* One process of the slice (in the accounting file: tenant-writable). */
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
	_Atomic uint64_t spins;       /* most CAS retries of one region call */
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
	/* The limits file (read-only to the slice). */
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

	/* The accounting file (writable by the slice; invariant 5). */
	uint64_t acct_magic __attribute__((aligned(CNL_REGION_LIMITS_SIZE)));
	uint32_t acct_version;
	uint32_t acct_size;
	_Atomic uint64_t live;   /* bit i: slot i counts (invariant 1) */
	_Atomic uint64_t peak;   /* highest sum seen by a reservation */
	_Atomic uint64_t oom;    /* allocations refused over quota */
	_Atomic uint64_t reaped; /* dead processes whose memory came back */

	struct cnl_bucket bucket;
	struct cnl_region_proc procs[CNL_REGION_PROCS];
} __attribute__((aligned(CNL_REGION_LIMITS_SIZE)));

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

/* A mapped region and the descriptor of its accounting file, which
 * carries the slot locks. */
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
 * cnl_region_create - create (or atomically replace) the region at path:
 * the accounting file path.acct (mode 0600; the agent chowns it to the
 * tenant), then the limits file path (mode 0644), each written to a
 * temporary file, then renamed.  quota 0 means no VRAM quota; share_pct 0
 * means no compute throttling.  opts may be NULL.  Returns 0 or a negative
 * errno.
 */
int cnl_region_create(const char *path, uint64_t quota, unsigned share_pct,
                      const char *project, const struct cnl_region_opts *opts);

/* cnl_board_create - create the GPU board file at path. */
int cnl_board_create(const char *path);

/*
 * cnl_region_map - map an existing region: the limits read-write where the
 * caller may write the file (the agent), else read-only; the accounting
 * read-write.  Checks magic, version and size of both.  Returns 0, -EPROTO
 * for a foreign or newer layout, or a negative errno.  ret is untouched on
 * failure.
 */
int cnl_region_map(const char *path, struct cnl_region_handle *ret);
/* cnl_region_map_ro - the same, the limits always read-only (the shim). */
int cnl_region_map_ro(const char *path, struct cnl_region_handle *ret);
/* cnl_region_acct_path - the accounting file's path for region path. */
int cnl_region_acct_path(const char *path, char *buf, size_t cap);
/* cnl_region_remove - unlink both files of a region. */
void cnl_region_remove(const char *path);
void cnl_region_unmap(struct cnl_region_handle *h);

/* cnl_board_map - map a board read-write; NULL on any failure. */
struct cnl_board *cnl_board_map(const char *path);

/* In-flight limit changes (agent side): one atomic store each; -EROFS
 * where this process mapped the limits read-only. */
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
 * cnl_region_reserve - charge bytes to slot if the quota allows (lock-free,
 * invariant 1; reaps dead processes first when due, invariant 3).  Returns
 * 0 or -ENOMEM (nothing charged).  force charges even over quota (memory
 * the driver already handed out, such as a pool growing by its
 * granularity).
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

/*
 * cnl_region_used - what the slice holds (the saturating sum of the live
 * slots), reaping first when due.  own_slot (or -1) is counted whatever
 * the live mask says.
 */
uint64_t cnl_region_used(struct cnl_region *r, int own_slot);

/*
 * A snapshot of the accounting for the agent and cnlab-region: no lock
 * taken or waited for, nothing written.  It reads a copy of the accounting
 * file (pread: the tenant may truncate the file, and reading a mapping
 * past its end would raise SIGBUS in the agent) and counts only slots
 * whose byte lock a process holds (F_GETLK; dead ones drop out at once).
 */
struct cnl_region_stat {
	uint64_t quota;
	uint64_t used;
	uint64_t peak;
	uint64_t oom;
	uint64_t reaped;
	uint64_t spins; /* most CAS retries any slot's process needed */
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
 * idle shares of the other rows.  Marks the row active.  Every slice of
 * the GPU can write every row, so a row counts at most 100 and the rate is
 * never below share_pct: forged rows can take the idle time of others from
 * a slice, never its own share.
 */
unsigned cnl_board_rate(struct cnl_board *b, unsigned slot, unsigned share_pct,
                        uint64_t now_ns);

/*
 * cnl_board_open - open a board for cnl_board_rate_fd (the shim): the
 * descriptor (read-write, close-on-exec), -EPROTO for a file that is not a
 * board, or a negative errno.  The shim never maps the board: every slice
 * of the GPU can write it, and a tenant that truncates a mapped file makes
 * every other slice's next access to it raise SIGBUS.
 */
int cnl_board_open(const char *path);

/*
 * cnl_board_rate_fd - cnl_board_rate through a descriptor of cnl_board_open:
 * writes the slice's row (pwrite), reads the rows (pread).  A board cut
 * short or unreadable gives share_pct (capped at the share, as without a
 * board).  Never below share_pct (see cnl_board_rate).
 */
unsigned cnl_board_rate_fd(int fd, unsigned slot, unsigned share_pct,
                           uint64_t now_ns);

/* Token bucket primitives (lock-free; shared with the shim's throttle). */
void cnl_bucket_refill(struct cnl_bucket *b, uint64_t now_ns, unsigned pct,
                       uint64_t burst_ns);
void cnl_bucket_charge(struct cnl_bucket *b, int64_t ns, uint64_t burst_ns);

#endif /* CNL_SHIM_REGION_H */
