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
 *
 * The saturation forecast (sched/forecast.h) runs throughout: at every
 * event its 90 s forecast of demand (held + pending, as a share of the
 * capacity taking work) is made (at most one per 10 s) and, when due
 * while pods still arrive, scored against the demand then, beside the
 * naive forecast "the demand stays as it is"; run-time estimates are the
 * trace's own run times.
 *
 * Cloud burst: instances of cloud_gpus GPUs of the world's most common
 * GPU type are launched at the stall (work waits while local use is at
 * the threshold: launched for the blocks waiting, less those booting),
 * or at the forecast as cnlabd's burst does (the demand forecast 90 s
 * ahead at the threshold and beyond the capacity: launched for that
 * excess, no more than the blocks waiting, less those booting); they
 * take work cloud_boot_s later.  Work is placed on local nodes first (they are
 * every job's preferred nodes), so the cloud takes only what does not
 * fit; an instance idle for 30 s is terminated when local use is below
 * the threshold or the work held and waiting fits without it.  Cost accrues per
 * second of instance life at cloud_gpu_price per GPU-hour; the cloud-only
 * baseline runs every pod's GPU time in the cloud at the same price.
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
	/* Cloud burst (see below): none, at the stall, or at the forecast. */
	enum cnl_burst_mode {
		CNL_BURST_NONE,
		CNL_BURST_STALL,
		CNL_BURST_FORECAST
	} burst;
	double burst_threshold; /* 0..1 of local capacity (0: 0.9) */
	double cloud_gpu_price; /* per GPU-hour, on-demand (0: 3.0) */
	int cloud_gpus;         /* GPUs per instance (0: 8) */
	int64_t cloud_boot_s;   /* launch to taking work (0: 120 s) */
	int cloud_max;          /* instances at once (0: 32) */
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
	double lost_gpu_hours; /* work lost to pre-emption */
	int64_t span;          /* seconds simulated */
	/* The 90 s forecast: mean and p95 absolute error (share of
	 * capacity), forecasts scored. */
	double fc_mae, fc_p95;
	size_t fc_scored;
	/* The same for the naive forecast "as now" (the baseline). */
	double naive_mae, naive_p95;
	/* Cloud burst. */
	size_t cloud_launched;
	double cloud_gpu_hours, cloud_cost, cloud_only_cost;
	size_t n_points;                 /* allocation over time */
	struct cnl_replay_point *points; /* free() it */
};

/* cnl_replay_run - -CNL_EPARSE when the pod list carries no times (the
 * five-column multigpu lists); -CNL_ECONFIG for bad settings. */
int cnl_replay_run(const struct cnl_fgd_world *w,
                   const struct cnl_replay_config *cfg,
                   struct cnl_replay_result *ret);

#endif /* CNL_SIM_REPLAY_H */
