/*
 * pick.c - cluster-first placement (see pick.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/pick.h"

static int name_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Add @name to the names of @p if new; -CNL_ESIZE when full. */
static int add_name(struct cnl_picks *p, const char *name)
{
	for (size_t k = 0; k < p->n; k++)
		if (strcmp(p->name[k], name) == 0)
			return 0;
	if (p->n == CNL_PICK_MAX)
		return -CNL_ESIZE;
	size_t len = strnlen(name, CNL_NAME_MAX - 1);

	memcpy(p->name[p->n], name, len);
	p->name[p->n][len] = '\0';
	p->n++;
	return 0;
}

int cnl_picks_find(const struct cnl_picks *p, const char *name)
{
	for (size_t k = 0; k < p->n; k++)
		if (strcmp(p->name[k], name) == 0)
			return (int)k;
	return -1;
}

/* The cluster of node @n: its label, "default" without one. */
static const char *label_of(const struct cnl_node *n)
{
	return n->cluster[0] ? n->cluster : "default";
}

int cnl_picks_scan(const struct cnl_cluster *c,
                   const char (*known)[CNL_NAME_MAX], size_t n_known,
                   struct cnl_picks *ret)
{
	struct cnl_picks p;
	int r;

	memset(&p, 0, sizeof(p));
	for (uint32_t i = 0; i < c->n_nodes; i++)
		if ((r = add_name(&p, label_of(&c->nodes[i]))) < 0)
			return r;
	for (size_t i = 0; i < n_known; i++)
		if ((r = add_name(&p, known[i])) < 0)
			return r;
	qsort(p.name, p.n, sizeof(p.name[0]), name_cmp);
	p.n_nodes = c->n_nodes;
	p.of_node = calloc(c->n_nodes + 1, 1);
	if (!p.of_node)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		int k = cnl_picks_find(&p, label_of(n));
		struct cnl_pick_load *l = &p.load[k];

		p.of_node[i] = (uint8_t)k;
		l->nodes++;
		if (n->state != CNL_NODE_UP)
			continue;
		l->nodes_up++;
		l->gpus += n->n_gpus;
		l->blocks_total += 100 * (int64_t)n->n_gpus;
		for (int g = 0; g < n->n_gpus; g++)
			l->blocks_used +=
			    CNL_BLOCKS_PER_GPU - cnl_gpu_free_blocks(c, i, g);
	}
	*ret = p;
	return 0;
}

void cnl_picks_done(struct cnl_picks *p)
{
	free(p->of_node);
	p->of_node = NULL;
	p->n = 0;
}

double cnl_picks_util(const struct cnl_picks *p, size_t k)
{
	const struct cnl_pick_load *l = &p->load[k];

	return l->blocks_total ? (double)l->blocks_used / l->blocks_total : 0;
}

int cnl_req_blocks(const struct cnl_alloc_req *r)
{
	switch (r->kind) {
	case CNL_REQ_BLOCKS:
		return r->blocks;
	case CNL_REQ_WHOLE:
		return 100 * r->gpus;
	case CNL_REQ_MIG:
		/* "3g.40gb": 3 of the 7 compute slices. */
		if (r->profile && r->profile[0] >= '1' && r->profile[0] <= '7')
			return (r->profile[0] - '0') * 100 /
			       CNL_MIG_COMPUTE_SLICES;
		return 0;
	default:
		return 0;
	}
}

const char *cnl_pick_why_text(enum cnl_pick_why why)
{
	switch (why) {
	case CNL_PICK_ASKED:
		return "asked for by the submission (--cluster)";
	case CNL_PICK_STARTS_NOW:
		return "it can start there now (the least loaded such)";
	case CNL_PICK_DATA_NOW:
		return "it holds the job's dataset and can start it now";
	case CNL_PICK_DATA:
		return "it holds the job's dataset (no cluster can start it "
		       "now)";
	case CNL_PICK_LEAST_LOADED:
		return "no cluster can start it now; the least loaded that "
		       "could";
	case CNL_PICK_NONE:
	default:
		return "no cluster could ever run it";
	}
}

/* Whether node @i could ever take @pp, within its node set, whatever its
 * state: a node down may be powered on or come back. */
static bool could_ever(const struct cnl_cluster *c, uint32_t i,
                       const struct cnl_req_prep *pp)
{
	return cnl_req_node_ok(&pp->req, i) &&
	       cnl_node_could_host(&c->nodes[i], pp);
}

static bool fits_now(const struct cnl_cluster *c, const struct cnl_picks *p,
                     const struct cnl_req_prep *pp, size_t k)
{
	struct cnl_plan pl;

	for (uint32_t i = 0; i < c->n_nodes && i < p->n_nodes; i++)
		if (p->of_node[i] == k && c->nodes[i].state == CNL_NODE_UP &&
		    cnl_req_node_ok(&pp->req, i) &&
		    cnl_alloc_may_fit(c, i, pp) &&
		    cnl_alloc_plan_fast(c, pp, i, &pl))
			return true;
	return false;
}

bool cnl_pick_fits_now(const struct cnl_cluster *c, const struct cnl_picks *p,
                       const struct cnl_job *j, size_t k)
{
	struct cnl_req_prep pp;

	return k < p->n && cnl_alloc_prepare(c, &j->req, &pp) == 0 &&
	       fits_now(c, p, &pp, k);
}

static bool has_dataset(const struct cnl_node *n, const char *ds)
{
	for (int d = 0; d < n->n_datasets; d++)
		if (strcmp(n->datasets[d], ds) == 0)
			return true;
	return false;
}

int cnl_pick_cluster(const struct cnl_cluster *c, const struct cnl_picks *p,
                     const struct cnl_job *j, int asked, uint64_t allowed,
                     struct cnl_pick *ret)
{
	uint32_t ever[CNL_PICK_MAX] = {0};
	uint8_t data[CNL_PICK_MAX] = {0};
	/* A spread gang needs a node per member in one cluster. */
	uint32_t need =
	    j->gang && j->spread && j->gang_size > 1 ? j->gang_size : 1;
	struct cnl_req_prep pp;
	int best = -1, best_rank = -1, r;
	double best_util = 0, best_cost = 0;

	*ret = (struct cnl_pick){.cluster = -1, .why = CNL_PICK_NONE};
	if ((r = cnl_alloc_prepare(c, &j->req, &pp)) < 0)
		return r;
	if (asked >= 0 && (size_t)asked < p->n) {
		ret->cluster = asked;
		ret->why = CNL_PICK_ASKED;
		ret->now = fits_now(c, p, &pp, (size_t)asked);
		return 0;
	}
	for (uint32_t i = 0; i < c->n_nodes && i < p->n_nodes; i++) {
		uint8_t k = p->of_node[i];

		if (k >= 64 || !(allowed >> k & 1) || !could_ever(c, i, &pp))
			continue;
		ever[k]++;
		if (j->dataset[0] && has_dataset(&c->nodes[i], j->dataset))
			data[k] = 1;
	}
	for (size_t k = 0; k < p->n; k++) {
		bool now;
		int rank;
		/* A cluster with nothing taking work (its nodes down, off or
		 * lost) is the most loaded: work goes there only when no
		 * other cluster could ever run it. */
		double u = p->load[k].blocks_total ? cnl_picks_util(p, k) : 2;

		if (ever[k] < need)
			continue;
		now = fits_now(c, p, &pp, k);
		rank = (now ? 2 : 0) + (data[k] ? 1 : 0);
		if (rank > best_rank ||
		    (rank == best_rank &&
		     (p->cost[k] < best_cost ||
		      (p->cost[k] == best_cost && u < best_util)))) {
			best = (int)k;
			best_rank = rank;
			best_util = u;
			best_cost = p->cost[k];
			ret->now = now;
		}
	}
	if (best < 0)
		return 0;
	ret->cluster = best;
	ret->why = best_rank == 3   ? CNL_PICK_DATA_NOW
	           : best_rank == 2 ? CNL_PICK_STARTS_NOW
	           : best_rank == 1 ? CNL_PICK_DATA
	                            : CNL_PICK_LEAST_LOADED;
	return 0;
}
