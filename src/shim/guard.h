/*
 * guard.h - what both interposers (libcnlab-cuda.so and libcnlab-hip.so)
 * share to keep a process inside its slice whatever its environment and
 * descriptors: the region pinned in the container, and the calls that
 * close descriptors, which must not drop the slot's record lock (region.h,
 * invariant 2).  guard.c is compiled into each shim (not into the region
 * library), so that each build of a shim carries its own CNL_SHIM_PIN.
 */
#ifndef CNL_SHIM_GUARD_H
#define CNL_SHIM_GUARD_H

/*
 * cnl_guard_region_path - the region this process belongs to.  In a
 * container the agent pins it in CNL_SHIM_PIN (default /etc/cnlab/region),
 * a file of the container's read-only /etc: a pin that exists wins over
 * CNLAB_REGION (*ret_env_ignored set when the environment named another);
 * one that cannot be read, is empty or is not absolute gives NULL with
 * *ret_broken set (fail closed).  Without a pin, CNLAB_REGION (NULL when
 * unset).  The answer may point into buf.
 */
const char *cnl_guard_region_path(char *buf, unsigned cap, int *ret_broken,
                                  int *ret_env_ignored);

/* The pin file this build reads (for log lines). */
extern const char cnl_guard_pin_file[];

/*
 * cnl_guard_keep_slot_fd - each shim names, once, the function that says
 * which descriptor's record lock owns this process's slot (or -1 while it
 * owns none): close, close_range, closefrom, dup2 and dup3 (exported by
 * guard.c) keep that descriptor open.  A function pointer, so that
 * guard.c needs no symbol of the shim that compiles it (no cycle between
 * files, build.no_cycles).
 */
void cnl_guard_keep_slot_fd(int (*slot_fd)(void));

struct cnl_region;

/*
 * cnl_guard_rate - the compute rate (percent) of the slice of region r at
 * time now: its share, scaled up by the idle shares of its GPU's board
 * when it has one (board_fd from cnl_board_open, or -1).  The board is
 * read and written through its descriptor (two system calls,
 * cnl_board_rate_fd), never mapped: any slice of the GPU may truncate it,
 * and a mapping would then raise SIGBUS here.  So its answer is kept for
 * a millisecond: a slice counts as active for CNL_BOARD_ACTIVE_NS after
 * its last mark, fifty times longer.  Threads racing here at worst both
 * ask the board.
 */
unsigned cnl_guard_rate(const struct cnl_region *r, int board_fd,
                        unsigned long long now);

/*
 * The IPC registry both shims keep (docs/shim.md, "Isolation"): an
 * exported handle (CNL_GUARD_IPC_HANDLE bytes) is registered as a file
 * named KIND-<hash of its bytes>, holding the exporter's project, in the
 * region's IPC directory (node-wide, mounted into every slice by the
 * agent) or, where the agent set none, "<region_path>.ipc" (this slice
 * only).
 */
#define CNL_GUARD_IPC_HANDLE 64
/* cnl_guard_ipc_path - the registry file of a handle; 0 or -ENAMETOOLONG. */
int cnl_guard_ipc_path(const struct cnl_region *r, const char *region_path,
                       const char *kind, const void *handle, char *buf,
                       unsigned long cap);
/* cnl_guard_ipc_register - file a handle this process exported. */
void cnl_guard_ipc_register(const struct cnl_region *r, const char *region_path,
                            const char *kind, const void *handle);
/* cnl_guard_ipc_owned - whether a handle is registered by r's project. */
int cnl_guard_ipc_owned(const struct cnl_region *r, const char *region_path,
                        const char *kind, const void *handle);

#endif /* CNL_SHIM_GUARD_H */
