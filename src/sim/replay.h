/*
 * replay.h - replay a pod list in time through the production scheduler.
 *
 * Pods arrive at their creation_time and run for deletion_time -
 * scheduled_time (pods the trace never scheduled: deletion - creation, at
 * least a second).  Unplaced pods wait in the queue and are retried by
 * cnl_sched_cycle() at every event (arrival or departure), with its
 * priorities, fair share, reservations, backfill and pre-emption.  QoS
 * maps to priority: Guaranteed critical, LS high, Burstable normal, BE low
 * and preemptible.  Teams are a deterministic hash of the pod name, and
 * they are tenants: CNLab's tenant rules apply (a slice above 14% of a GPU
 * never shares the GPU with another team), unlike the FGD protocol, which
 * places everything as one project.  A
 * pre-empted pod goes back to the queue and runs again from the start; its
 * lost work is counted.  Usage is charged to fair share as pods end.
 * With copies = K each pod arrives K times, a second apart (K times the
 * load); copies are hashed to teams by name and copy number.
 * With copies = K each pod arrives K times, a second apart (K times the
 * load), the copies hashed to teams by name and copy number.
 */
#ifndef CNL_SIM_REPLAY_H
#define CNL_SIM_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/fgd.h"

struct cnl_replay_config {
	const char *policy;   /* registry name; "cnlab" */
	int teams;            /* 1..64 */
	double arrival_scale; /* arrival times are multiplied by it (> 0):
	                       * below 1 compresses the trace, raising load */
	int copies; /* the pod list K times over (1..16), a second apart */
	FILE *csv;  /* time series out (may be NULL) */
};

struct cnl_replay_point {
	int64_t t;        /* seconds */
	double alloc_pct; /* GPU capacity allocated */
	uint32_t pending;
};

struct cnl_replay_result {
	size_t pods, started, never_started, preemptions, cycles;
	double wait_mean, wait_p50, wait_p95, wait_p99; /* seconds */
	double waited_share; /* pods that ever waited, 0..1 */
	double jain;         /* over teams, of 1 / mean slowdown */
	double alloc_mean; /* GPU allocation, time-weighted, while pods arrive,
	                      % */
	double alloc_peak; /* the highest GPU allocation, % */
	double lost_gpu_hours;           /* work lost to pre-emption */
	int64_t span;                    /* seconds simulated */
	size_t n_points;                 /* allocation over time */
	struct cnl_replay_point *points; /* free() it */
};

/* cnl_replay_run - -CNL_EPARSE when the pod list carries no times (the
 * five-column multigpu lists); -CNL_ECONFIG for bad settings. */
int cnl_replay_run(const struct cnl_fgd_world *w,
                   const struct cnl_replay_config *cfg,
                   struct cnl_replay_result *ret);

#endif /* CNL_SIM_REPLAY_H */
