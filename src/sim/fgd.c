/*
 * fgd.c - the FGD experiment protocol (see fgd.h).
 *
 * The cluster state is the allocator's own (struct cnl_cluster), so every
 * placement obeys the same rules as in production and the invariant
 * checker can vouch for a run.  All pods are one project: the trace has
 * no tenants, and CNLab's tenant rules must not change the experiment.
 *
 * The engine proposes candidates and the policy scores them: per node, the
 * allocator's plan for whole-GPU and CPU-only pods; for a GPU-sharing pod,
 * the GPU the policy asks for (best fit, random, or every fitting GPU,
 * one per distinct free capacity, scored).  The lowest score wins; ties go
 * to the seeded node priority, then to the lower GPU index.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sim/fgd.h"

#define PROJECT 1

/* ---- world ------------------------------------------------------------ */

struct ttype {
	int64_t cpu;
	int milli, num;
	uint64_t types;
	size_t count;
};

static int cmp_ttype_key(const void *a, const void *b)
{
	const struct ttype *x = a, *y = b;

	if (x->cpu != y->cpu)
		return x->cpu < y->cpu ? -1 : 1;
	if (x->milli != y->milli)
		return x->milli < y->milli ? -1 : 1;
	if (x->num != y->num)
		return x->num < y->num ? -1 : 1;
	return (x->types > y->types) - (x->types < y->types);
}

/* By popularity, then descending key (as the paper's simulator). */
static int cmp_ttype_pop(const void *a, const void *b)
{
	const struct ttype *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return -cmp_ttype_key(a, b);
}

static int build_mix(struct cnl_fgd_world *w)
{
	struct ttype *t = malloc((w->n_pods + 1) * sizeof(*t));
	size_t n = 0, covered = 0;

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < w->n_pods; i++)
		t[i] = (struct ttype){.cpu = w->pods[i].cpu_milli,
		                      .milli = w->pods[i].gpu_milli,
		                      .num = w->pods[i].num_gpu,
		                      .types = w->pods[i].gpu_types,
		                      .count = 1};
	qsort(t, w->n_pods, sizeof(*t), cmp_ttype_key);
	for (size_t i = 0; i < w->n_pods; i++) {
		if (n && cmp_ttype_key(&t[n - 1], &t[i]) == 0)
			t[n - 1].count++;
		else
			t[n++] = t[i];
	}
	qsort(t, n, sizeof(*t), cmp_ttype_pop);
	memset(&w->mix, 0, sizeof(w->mix));
	for (size_t i = 0; i < n && w->mix.n < CNL_MIX_MAX; i++) {
		__typeof__(w->mix.t[0]) *m = &w->mix.t[w->mix.n++];
		m->cpu_milli = t[i].cpu;
		m->gpu_types = t[i].types;
		m->weight = (double)t[i].count;
		if (t[i].num == 0) {
			m->kind = CNL_REQ_CPU;
		} else if (t[i].milli < 1000) {
			m->kind = CNL_REQ_BLOCKS;
			m->blocks = (t[i].milli + 9) / 10;
		} else {
			m->kind = CNL_REQ_WHOLE;
			m->gpus = t[i].num;
		}
		covered += t[i].count;
		if ((double)covered >= 0.95 * (double)w->n_pods)
			break;
	}
	w->mix_coverage = (double)covered / (double)w->n_pods;
	free(t);
	return 0;
}

int cnl_fgd_world_load(struct cnl_fgd_world *w, const char *nodes_csv,
                       const char *pods_csv, char *err, size_t errlen)
{
	struct cnl_cluster *c = NULL;
	int r;

	memset(w, 0, sizeof(*w));
	cnl_catalog_init(&w->cat);
	if ((r = cnl_cluster_new(&w->cat, &c)) < 0)
		return r;
	if ((r = cnl_trace_load_nodes(nodes_csv, &w->cat, c, err, errlen)) < 0)
		goto fail;
	w->n_nodes = c->n_nodes;
	w->nodes = calloc(w->n_nodes + 1, sizeof(*w->nodes));
	w->names = calloc(w->n_nodes + 1, sizeof(*w->names));
	if (!w->nodes || !w->names) {
		r = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < w->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		memcpy(w->names[i], n->name, sizeof(w->names[i]));
		w->nodes[i] = (struct cnl_node_spec){
		    .name = w->names[i],
		    .gpu_type = n->n_gpus ? n->gpu_type : -1,
		    .n_gpus = n->n_gpus,
		    .cpu_milli = n->cpu_total,
		    .mem_mib = n->mem_total};
		w->gpus += n->n_gpus;
	}
	cnl_cluster_free(c);
	c = NULL;
	if ((r = cnl_trace_load_pods(pods_csv, &w->cat, &w->pods, &w->n_pods,
	                             err, errlen)) < 0)
		goto fail;
	if (w->n_pods == 0 || w->gpus == 0) {
		snprintf(err, errlen, "%s: %s",
		         w->n_pods ? nodes_csv : pods_csv,
		         w->n_pods ? "no GPU in the cluster" : "no pods");
		r = -CNL_EPARSE;
		goto fail;
	}
	if ((r = build_mix(w)) < 0)
		goto fail;
	return 0;
fail:
	cnl_cluster_free(c);
	cnl_fgd_world_done(w);
	return r;
}

void cnl_fgd_world_done(struct cnl_fgd_world *w)
{
	free(w->nodes);
	free(w->names);
	free(w->pods);
	w->nodes = NULL;
	w->names = NULL;
	w->pods = NULL;
	w->n_nodes = w->n_pods = 0;
}

/* ---- run -------------------------------------------------------------- */

struct rng {
	uint64_t s;
};

static uint64_t rnext(struct rng *r)
{
	uint64_t x = (r->s += 0x9e3779b97f4a7c15ULL);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static size_t rbelow(struct rng *r, size_t n)
{
	return (size_t)(rnext(r) % n);
}

static int64_t pod_milli(const struct cnl_trace_pod *p)
{
	return (int64_t)p->num_gpu * p->gpu_milli;
}

static const struct cnl_trace_pod *sort_pods;

static int cmp_name(const void *a, const void *b)
{
	return strcmp(sort_pods[*(const size_t *)a].name,
	              sort_pods[*(const size_t *)b].name);
}

/* The arrival order: shuffled, then tuned to `target` milli-GPUs. */
static int arrivals(const struct cnl_fgd_world *w, struct rng *rg,
                    int64_t target, size_t **ret, size_t *ret_n)
{
	size_t n = w->n_pods, cap = n * 2 + 16, m;
	size_t *byname = malloc(n * sizeof(*byname));
	size_t *a = malloc(cap * sizeof(*a));
	int64_t total = 0;

	if (!byname || !a) {
		free(byname);
		free(a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		byname[i] = i;
	sort_pods = w->pods;
	qsort(byname, n, sizeof(*byname), cmp_name);
	memcpy(a, byname, n * sizeof(*a));
	for (size_t i = n; i > 1; i--) {
		size_t j = rbelow(rg, i);
		size_t t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
	m = n;
	for (size_t i = 0; i < n; i++)
		total += pod_milli(&w->pods[i]);
	/* Below the target: append draws until it is reached.  Above it:
	 * drop random pods until it is not exceeded. */
	bool grow = total < target;
	while (grow && total < target) {
		if (m == cap) {
			size_t *na = realloc(a, (cap *= 2) * sizeof(*a));
			if (!na) {
				free(byname);
				free(a);
				return -ENOMEM;
			}
			a = na;
		}
		a[m] = byname[rbelow(rg, n)];
		total += pod_milli(&w->pods[a[m++]]);
	}
	while (!grow && total > target && m > 0) {
		size_t j = rbelow(rg, m);
		total -= pod_milli(&w->pods[a[j]]);
		memmove(&a[j], &a[j + 1], (m - j - 1) * sizeof(*a));
		m--;
	}
	free(byname);
	*ret = a;
	*ret_n = m;
	return 0;
}

struct best {
	bool have;
	double score;
	uint32_t rank;
	struct cnl_plan plan;
};

static void consider(struct best *b, double score, uint32_t rank,
                     const struct cnl_plan *plan)
{
	if (b->have && (score > b->score ||
	                (score == b->score &&
	                 (rank > b->rank ||
	                  (rank == b->rank && plan->gpu >= b->plan.gpu)))))
		return;
	b->have = true;
	b->score = score;
	b->rank = rank;
	b->plan = *plan;
}

/* Candidates on node `i` for job `j`, scored into `b`. */
static void score_node(const struct cnl_sched_view *v,
                       const struct cnl_policy_ops *pol,
                       const struct cnl_job *j, const struct cnl_req_prep *p,
                       uint32_t i, uint32_t rank, struct rng *rg,
                       struct best *b)
{
	const struct cnl_cluster *c = v->c;
	struct cnl_plan pl;

	if (!cnl_alloc_plan_fast(c, p, i, &pl))
		return;
	if (j->req.kind != CNL_REQ_BLOCKS ||
	    pol->gpu_choice == CNL_GPU_BEST_FIT) {
		double sc = cnl_policy_score(v, j, &pl);
		consider(b, cnl_policy_refine(v, j, &pl, sc), rank, &pl);
		return;
	}
	/* Every GPU that fits, one per distinct free capacity. */
	const struct cnl_node *n = &c->nodes[i];
	int fits[CNL_NODE_MAX_GPUS], nf = 0;
	for (int g = 0; g < n->n_gpus; g++) {
		const struct cnl_gpu *gp = &n->gpus[g];
		if (gp->n_allocs && gp->mode != CNL_GPU_BLOCK)
			continue;
		int freeb = CNL_BLOCKS_PER_GPU - gp->used;
		if (freeb < j->req.blocks)
			continue;
		bool dup = false;
		for (int q = 0; q < nf && !dup; q++)
			dup =
			    CNL_BLOCKS_PER_GPU - n->gpus[fits[q]].used == freeb;
		if (!dup || pol->gpu_choice == CNL_GPU_RANDOM)
			fits[nf++] = g;
	}
	if (nf == 0)
		return;
	pl.kind = CNL_PLACE_BLOCKS;
	pl.n_blocks = (uint8_t)j->req.blocks;
	if (pol->gpu_choice == CNL_GPU_RANDOM) {
		pl.gpu = (uint8_t)fits[rbelow(rg, (size_t)nf)];
		consider(b, cnl_policy_score(v, j, &pl), rank, &pl);
		return;
	}
	for (int q = 0; q < nf; q++) {
		pl.gpu = (uint8_t)fits[q];
		double sc = cnl_policy_score(v, j, &pl);
		consider(b, cnl_policy_refine(v, j, &pl, sc), rank, &pl);
	}
}

int cnl_fgd_run(const struct cnl_fgd_world *w, const char *policy,
                uint64_t seed, double tune, struct cnl_fgd_result *ret)
{
	struct cnl_sched_config cfg;

	cnl_fgd_config_default(&cfg);
	return cnl_fgd_run_cfg(w, policy, seed, tune, &cfg, ret);
}

void cnl_fgd_config_default(struct cnl_sched_config *cfg)
{
	cnl_sched_config_default(cfg);
	cfg->w_pack = 0;
	cfg->w_frag = 1;
	cfg->w_order = 300;
}

int cnl_fgd_run_cfg(const struct cnl_fgd_world *w, const char *policy,
                    uint64_t seed, double tune,
                    const struct cnl_sched_config *base,
                    struct cnl_fgd_result *ret)
{
	struct cnl_sched_config cfg;
	struct cnl_sched *s = NULL;
	struct cnl_cluster *c = NULL;
	struct cnl_fgd_result res;
	struct rng rg = {.s = seed};
	size_t *order = NULL, n_order = 0;
	uint32_t *rank = NULL;
	int r;

	if (!(tune > 0 && tune <= 10) || !cnl_policy_find(policy))
		return -CNL_ECONFIG;
	memset(&res, 0, sizeof(res));
	snprintf(res.policy, sizeof(res.policy), "%s",
	         cnl_policy_find(policy)->name);
	res.seed = seed;
	res.tune = tune;
	for (int p = 0; p < CNL_FGD_CURVE_MAX; p++)
		res.curve[p] = res.frag_curve[p] = -1;
	cfg = *base;
	snprintf(cfg.policy, sizeof(cfg.policy), "%s", res.policy);
	cfg.mix = w->mix;
	if ((r = cnl_sched_new(&cfg, &s)) < 0)
		return r;
	if ((r = cnl_cluster_new(&w->cat, &c)) < 0)
		goto out;
	for (size_t i = 0; i < w->n_nodes; i++)
		if ((r = cnl_cluster_add_node(c, &w->nodes[i])) < 0)
			goto out;
	int64_t cap_milli = w->gpus * 1000;
	if ((r = arrivals(w, &rg, (int64_t)(tune * (double)cap_milli), &order,
	                  &n_order)) < 0)
		goto out;
	/* The node priority for ties: a random permutation. */
	rank = malloc((w->n_nodes + 1) * sizeof(*rank));
	if (!rank) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < w->n_nodes; i++)
		rank[i] = (uint32_t)i;
	for (size_t i = w->n_nodes; i > 1; i--) {
		size_t j = rbelow(&rg, i);
		uint32_t t = rank[i - 1];
		rank[i - 1] = rank[j];
		rank[j] = t;
	}

	const struct cnl_policy_ops *pol = cnl_sched_policy(s);
	struct cnl_sched_view v = {
	    .s = s, .c = c, .seed = seed, .capacity_blocks = w->gpus * 100};
	int64_t arrived = 0, alloc = 0;
	int next_point = 0;
	bool frag_done = false;
	/* The cluster's fragmentation after every arrival, kept as a sum of
	 * per-node values: a placement changes one node. */
	double *nfrag = malloc((c->n_nodes + 1) * sizeof(*nfrag)), frag = 0;
	if (!nfrag) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < c->n_nodes; i++)
		frag += nfrag[i] = cnl_frag_node(c, i, &w->mix);
	for (size_t k = 0; k < n_order; k++) {
		const struct cnl_trace_pod *pod = &w->pods[order[k]];
		struct cnl_job j = {.id = k + 1, .state = CNL_JOB_PENDING};
		struct cnl_req_prep p;
		struct best b = {0};
		if ((r = cnl_trace_pod_req(&w->cat, pod, PROJECT, &j.req)) <
		        0 ||
		    (r = cnl_alloc_prepare(c, &j.req, &p)) < 0)
			goto out;
		for (uint32_t i = 0; i < c->n_nodes; i++)
			if (cnl_alloc_may_fit(c, i, &p))
				score_node(&v, pol, &j, &p, i, rank[i], &rg,
				           &b);
		res.arrived++;
		arrived += pod_milli(pod);
		if (b.have) {
			uint32_t id;
			cnl_alloc_plan_masks(c, &b.plan);
			if ((r = cnl_alloc_commit(c, &p, &b.plan, &id)) < 0) {
				free(nfrag);
				goto out;
			}
			frag -= nfrag[b.plan.node];
			nfrag[b.plan.node] =
			    cnl_frag_node(c, b.plan.node, &w->mix);
			frag += nfrag[b.plan.node];
			alloc += pod_milli(pod);
			res.placed++;
		} else {
			res.failed++;
		}
		double arrived_pct =
		    100.0 * (double)arrived / (double)cap_milli;
		double alloc_pct = 100.0 * (double)alloc / (double)cap_milli;
		double frag_pct = 100.0 * frag / (double)(w->gpus * 100);
		while (next_point < CNL_FGD_CURVE_MAX &&
		       arrived_pct >= next_point) {
			res.frag_curve[next_point] = frag_pct;
			res.curve[next_point++] = alloc_pct;
		}
		if (!frag_done && arrived_pct >= 90) {
			frag_done = true;
			res.alloc_pct_90 = alloc_pct;
			res.frag_pct_90 = frag_pct;
		}
		res.arrived_pct = arrived_pct;
		res.alloc_pct = alloc_pct;
	}
	free(nfrag);
	*ret = res;
	r = 0;
out:
	free(order);
	free(rank);
	cnl_cluster_free(c);
	cnl_sched_free(s);
	return r;
}
