/*
 * pick.h - cluster-first placement: the clusters of a snapshot (its nodes
 * grouped by their `cluster` label; "default" for nodes without one) and the
 * cluster a job goes to before that cluster's own policy places it.
 *
 * A controller that governs several clusters picks a cluster for each
 * pending job (cnl_pick_cluster), then runs one scheduling cycle per
 * cluster, each with that cluster's policy and weights, over the jobs
 * picked for it and the nodes it holds.  The pick, in order:
 *
 *   1. The cluster the user asked for (`--cluster`), if any: nothing
 *      else is considered.
 *   2. Among the clusters that could ever run the job (a node of a
 *      GPU type it allows, with enough GPUs, CPU and memory, within its
 *      node lists: a node down or off counts, as it may come back; for a
 *      spread gang, as many such nodes as it has members), one
 *      where it can start now beats one
 *      where it would wait.
 *   3. Then one that holds its dataset (a node labelled with it).
 *   4. Then the cheapest (cnl_picks.cost: a cloud cluster's price per
 *      GPU-hour, 0 on one's own GPUs), so that bought capacity takes
 *      work only where the clusters owned would not start it as soon.
 *   5. Then the least loaded (share of GPU capacity in use), then the
 *      name, so the same inputs give the same pick.
 *
 * Pure, like the rest of the library.
 */
#ifndef CNL_SCHED_PICK_H
#define CNL_SCHED_PICK_H

#include <stddef.h>
#include <stdint.h>

#include "sched/alloc.h"
#include "sched/sched.h"

#define CNL_PICK_MAX 64 /* clusters one controller governs */

struct cnl_pick_load {
	uint32_t nodes, nodes_up; /* nodes; those taking work */
	uint32_t gpus;            /* GPUs of nodes taking work */
	int64_t blocks_total;     /* 100 per such GPU */
	int64_t blocks_used;      /* held: blocks, MIG compute shares */
};

struct cnl_picks {
	size_t n;
	char name[CNL_PICK_MAX][CNL_NAME_MAX];
	struct cnl_pick_load load[CNL_PICK_MAX];
	/* Price per GPU-hour of cluster k (0 after the scan; the caller
	 * sets those of the clusters it pays for by the hour). */
	double cost[CNL_PICK_MAX];
	uint8_t *of_node; /* cluster index of each node of the snapshot */
	uint32_t n_nodes;
};

/*
 * cnl_picks_scan - the clusters of @c: those its nodes are labelled with
 * and the @n_known names in @known (clusters configured before any node
 * joined them), each once, in name order, with their load.  -CNL_ESIZE
 * beyond CNL_PICK_MAX clusters, -ENOMEM.  Free with cnl_picks_done().
 */
int cnl_picks_scan(const struct cnl_cluster *c,
                   const char (*known)[CNL_NAME_MAX], size_t n_known,
                   struct cnl_picks *ret);
void cnl_picks_done(struct cnl_picks *p);

/* cnl_picks_find - the index of cluster @name, or -1. */
int cnl_picks_find(const struct cnl_picks *p, const char *name);

/* Utilisation of cluster @k: used / total blocks, 0 with no GPUs. */
double cnl_picks_util(const struct cnl_picks *p, size_t k);

enum cnl_pick_why {
	CNL_PICK_ASKED,      /* the user's --cluster */
	CNL_PICK_STARTS_NOW, /* the only, or the least loaded, that fits now */
	CNL_PICK_DATA_NOW,   /* holds its dataset and fits now */
	CNL_PICK_DATA,       /* holds its dataset; waits there */
	CNL_PICK_LEAST_LOADED, /* fits nowhere now; the least loaded */
	CNL_PICK_NONE,         /* no cluster could ever run it */
};

struct cnl_pick {
	int cluster; /* index in cnl_picks, -1 for NONE */
	uint8_t why; /* enum cnl_pick_why */
	bool now;    /* the job fits there now */
};

/* The GPU capacity request @r asks for, in blocks (a MIG profile its
 * compute share, whole GPUs 100 each, CPU work 0). */
int cnl_req_blocks(const struct cnl_alloc_req *r);

/* A sentence for @why (e.g. "holds its dataset"). */
const char *cnl_pick_why_text(enum cnl_pick_why why);

/*
 * cnl_pick_cluster - where pending job @j goes: cluster @asked (>= 0, the
 * user's), else the best by the rules at the top; @allowed (bit k:
 * cluster k may be chosen; ~0 for all) leaves out clusters the job may not
 * go to.  Reads the snapshot; changes nothing.  0, or a negative code
 * from cnl_alloc_prepare() for an invalid request.
 */
int cnl_pick_cluster(const struct cnl_cluster *c, const struct cnl_picks *p,
                     const struct cnl_job *j, int asked, uint64_t allowed,
                     struct cnl_pick *ret);

/*
 * cnl_pick_fits_now - whether @j could start on some node of cluster @k
 * now (no reservation or queue considered).
 */
bool cnl_pick_fits_now(const struct cnl_cluster *c, const struct cnl_picks *p,
                       const struct cnl_job *j, size_t k);

#endif /* CNL_SCHED_PICK_H */
