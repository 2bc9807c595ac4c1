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
 * cnl_guard_slot_fd - defined by each shim: the descriptor whose record
 * lock owns this process's slot, or -1 while it owns none.  close,
 * close_range, closefrom, dup2 and dup3 (exported by guard.c) keep that
 * descriptor open.
 */
int cnl_guard_slot_fd(void);

#endif /* CNL_SHIM_GUARD_H */
