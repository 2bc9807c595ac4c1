/*
 * burst.h - the burst policy acting: cloud GPUs launched when a cluster's
 * forecast crosses the threshold, and given back when they go idle.
 *
 * A thread of cnlabd's leader (burst.c).  Each tick, under the API's
 * lock, it reads the burst policy (api_cloud.c), the controller's view
 * of the queue and forecast (cnl_ctl_burst_view()) and the instances it
 * launched (documents of kind "cloud_instance"); then, without the lock,
 * it talks to the provider (cloud.h); then records what came of it.
 *
 * Launch.  When a cluster of owned GPUs forecasts demand 90 s ahead at
 * or above the threshold (a share of its capacity), the work waiting
 * that may leave (not of an on-prem-only project, not asking for a
 * cluster of owned GPUs) is covered by instances of the cheapest type
 * that fits each job (the account's instance types; GPUs and on-demand
 * price from cloud_types.c or the account's "prices"; spot prices asked
 * of the provider), as much as the forecast's excess over capacity and
 * no more than the instances launching or idle already cover, in the
 * strategy's order of markets.  A type a market has no capacity for is
 * left alone for a while; an outage or throttling pauses launches with
 * back-off; refused credentials stop them until the account changes.
 * Each instance boots with user data that starts cnlab-agent with a
 * one-time join token for its own node name, in cluster
 * "cloud-PROVIDER"; the controller knows it as a cloud node before it
 * joins (cnl_ctl_cloud_node()).
 *
 * Budget.  Cost accrues per second of each instance's life at its price
 * (launched to terminated).  The budget is a hard stop: no launch whose
 * first ten minutes would pass it, and every instance is given back once
 * the spend plus a minute of the running instances' cost reaches it;
 * audited (cloud.budget) and shown as cnlab_cloud_budget_exhausted.
 *
 * Return.  An instance whose node holds nothing, while no work that may
 * leave waits for its GPUs, for the idle time (default 10 s) is fenced
 * (its node's credentials revoked, the node lost) and terminated: within
 * 30 s of being given back.  When the clusters of owned GPUs fall well
 * under the threshold, cloud nodes are cordoned: their work finishes,
 * nothing new goes out, and they end idle.  A spot interruption, an
 * instance the provider ended, an agent gone silent or one that never
 * joined (boot time-out) end the same way, their work requeued.
 */
#ifndef CNL_SERVER_BURST_H
#define CNL_SERVER_BURST_H

#include <stdint.h>

#include "net/metrics.h"

struct cnl_api;
struct cnl_burst;

struct cnl_burst_config {
	const char *image;   /* the machine image; NULL: bursting is off */
	const char *agent;   /* cnlab-agent's path on it */
	const char *url;     /* cnlabd's URL as instances reach it */
	int64_t interval_ms; /* between ticks; 0: 1 s */
	int64_t idle_ms;     /* idle before given back; 0: 10 s */
	int64_t boot_ms;     /* to join; 0: 10 min */
	int max_instances;   /* live at once; 0: 16 */
};

/* cnl_burst_new - the instances launched before (cloud nodes made known
 * to the controller); call holding the API's lock.  0 or -errno. */
int cnl_burst_new(struct cnl_api *api, const struct cnl_burst_config *cfg,
                  struct cnl_burst **ret);
/* cnl_burst_set_url - cnlabd's URL once its listener has a port. */
void cnl_burst_set_url(struct cnl_burst *b, const char *url);
int cnl_burst_start(struct cnl_burst *b);
void cnl_burst_stop(struct cnl_burst *b); /* WITHOUT the lock */
void cnl_burst_free(struct cnl_burst *b);
/* The burst's gauges (instances, spend, budget); with the lock held. */
void cnl_burst_metrics(struct cnl_burst *b, struct cnl_metrics_buf *mb);

#endif
