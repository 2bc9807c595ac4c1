/*
 * sched.c - one scheduling cycle (see sched.h for the algorithm).
 *
 * Design notes.
 *
 * 1. What-if on the real state.  Reservations ("when could this job start
 *    on node n?"), the backfill rule ("does reservation R still fit at its
 *    time if this job starts now?") and pre-emption ("which victims make
 *    room?") are answered by releasing allocations with cnl_alloc_free(),
 *    asking the allocator, and putting them back with cnl_alloc_restore()
 *    in reverse order.  The allocator's exact rules (MIG geometry, tenant
 *    boundaries) thus apply to future time too, with no second model.
 *
 * 2. Cheap before exact.  A request no node of its GPU types could pass
 *    (per-type maxima of the node summaries) is refused without a scan;
 *    node search runs the allocator's summary test on every node and plans
 *    only where it passes; a shape that found no node is remembered for
 *    the rest of the cycle (capacity only shrinks within a cycle, except
 *    by pre-emption, which clears the memory).  The earliest start of a
 *    blocked job is bounded from below per node by a capacity-only replay
 *    (cached per shape: placements only raise the true bounds, so a cached
 *    one stays a lower bound), and the exact replay runs on nodes in order
 *    of that bound until the bound passes the best time found.
 *    Pre-emption does the same with a capacity-only estimate of the
 *    victims each node needs.
 *
 * 3. Team order is live.  Each team's queue head carries its key; when a
 *    team places a job its held capacity and fair-share factor change and
 *    only its key is recomputed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/sched-internal.h"

#define NONE  UINT32_MAX
#define T_INF INT64_MAX

/* ---- reasons, config, lifecycle -------------------------------------- */

static const char *const reason_text[] = {
#define CNL_REASON_TEXT(name, text) text,
    CNL_REASON_LIST(CNL_REASON_TEXT)
#undef CNL_REASON_TEXT
};

const char *cnl_reason_text(enum cnl_reason r)
{
	if ((unsigned)r >= CNL_WHY_COUNT_)
		return "unknown";
	return reason_text[r];
}

void cnl_sched_config_default(struct cnl_sched_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	memcpy(cfg->policy, "cnlab", 6);
	cfg->w_deadline = 4;
	cfg->w_fairshare = 2;
	cfg->w_age = 1;
	cfg->w_pack = 1;
	cfg->w_locality = 2.0 * CNL_SCORE_OPEN_NODE;
	cfg->w_network = 0.5 * CNL_SCORE_OPEN_NODE;
	cfg->w_frag = 10;
	cfg->order_multi = 0.3;
	cfg->age_max_ms = 7LL * 24 * 3600 * 1000;
	cfg->deadline_horizon_ms = 24LL * 3600 * 1000;
	cfg->min_run_ms = 10LL * 60 * 1000;
	cfg->grace_ms = 5LL * 60 * 1000;
	cfg->idle_power_down_ms = 30LL * 60 * 1000;
	cfg->default_runtime_ms = 4LL * 3600 * 1000;
	cfg->max_reservations = 8;
	cfg->preempt_class_gap = 1;
	cfg->frag_candidates = 4;
	cfg->fs_half_life_ms = CNL_FS_HALF_LIFE_DEFAULT_MS;
	cnl_task_mix_default(&cfg->mix);
}

static bool weight_ok(double w)
{
	return isfinite(w) && w >= 0;
}

int cnl_sched_new(const struct cnl_sched_config *cfg, struct cnl_sched **ret)
{
	const struct cnl_policy_ops *pol;
	struct cnl_sched *s;

	if (!memchr(cfg->policy, '\0', sizeof(cfg->policy)))
		return -CNL_ECONFIG;
	pol = cnl_policy_find(cfg->policy);
	if (!pol)
		return -CNL_ECONFIG;
	if (!weight_ok(cfg->w_deadline) || !weight_ok(cfg->w_fairshare) ||
	    !weight_ok(cfg->w_age) || !weight_ok(cfg->w_pack) ||
	    !weight_ok(cfg->w_locality) || !weight_ok(cfg->w_network) ||
	    !weight_ok(cfg->w_frag) || !weight_ok(cfg->w_order) ||
	    !weight_ok(cfg->order_multi))
		return -CNL_ECONFIG;
	if (cfg->age_max_ms <= 0 || cfg->deadline_horizon_ms <= 0 ||
	    cfg->min_run_ms < 0 || cfg->grace_ms < 0 ||
	    cfg->idle_power_down_ms < 0 || cfg->default_runtime_ms <= 0 ||
	    cfg->max_reservations < 0 || cfg->preempt_class_gap < 1 ||
	    cfg->preempt_class_gap > 3 || cfg->frag_candidates < 1 ||
	    cfg->frag_candidates > 32 || cfg->mix.n < 0 ||
	    cfg->mix.n > CNL_MIX_MAX)
		return -CNL_ECONFIG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->pol = pol;
	cnl_fs_init(&s->fs, cfg->fs_half_life_ms);
	*ret = s;
	return 0;
}

void cnl_sched_free(struct cnl_sched *s)
{
	if (!s)
		return;
	cnl_fs_done(&s->fs);
	free(s->idle_since);
	free(s->teams);
	for (uint32_t i = 0; i < s->n_runs; i++)
		free(s->runs[i].v);
	free(s->runs);
	free(s->resv);
	free(s->resv_head);
	free(s->gang_nodes);
	free(s);
}

struct cnl_fairshare *cnl_sched_fairshare(struct cnl_sched *s)
{
	return &s->fs;
}

void cnl_decisions_done(struct cnl_decisions *d)
{
	free(d->d);
	d->d = NULL;
	d->n = d->cap = 0;
}

static int push(struct cnl_decisions *out, const struct cnl_decision *d)
{
	if (out->n == out->cap) {
		size_t cap = out->cap ? out->cap * 2 : 256;
		struct cnl_decision *nd = realloc(out->d, cap * sizeof(*nd));
		if (!nd)
			return -ENOMEM;
		out->d = nd;
		out->cap = cap;
	}
	out->d[out->n++] = *d;
	return 0;
}

/* ---- teams ------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* ---- the cycle's working state --------------------------------------- */

#define FAIL_SLOTS 1024
#define FAIL_PAIRS 6

struct fail_ent {
	uint64_t key;
	uint8_t n;
	int64_t cpu[FAIL_PAIRS], mem[FAIL_PAIRS];
};

struct cyc {
	struct cnl_sched *s;
	struct cnl_cluster *c;
	const struct cnl_job *jobs;
	size_t n_jobs;
	int64_t now;
	struct cnl_sched_view v;
	struct cnl_decisions *out;
	struct cnl_req_prep *prep; /* per job */
	uint8_t *done;             /* per job: has its decision */
	uint8_t *victim;           /* per job: pre-empted this cycle */
	size_t n_resv_plain;       /* reservations without a deadline */
	struct fail_ent *fail;     /* FAIL_SLOTS */
	/* Per catalog type: the largest node of the type (for "never"). */
	int64_t type_cpu[CNL_CATALOG_MAX_TYPES],
	    type_mem[CNL_CATALOG_MAX_TYPES];
	int type_gpus[CNL_CATALOG_MAX_TYPES];
	int64_t max_cpu, max_mem;
	/* Pre-emption: victims eligible this cycle, by class; the nodes that
	 * hold any; shapes (per class) known to find none. */
	size_t victims_by_prio[4];
	uint32_t *victim_nodes;
	size_t n_victim_nodes;
	/* Per victim node (by position in victim_nodes), its eligible
	 * victims from vl_jobs[vl_off[i]] to vl_jobs[vl_off[i + 1]], by
	 * (class, work lost, index): the cheapest first. */
	uint32_t *vl_off, *vl_jobs;
	struct fail_ent *pfail;
	/* Per GPU type, the best of each node summary field: a request no
	 * node of its types could pass is refused without a node scan. */
	struct type_max {
		int64_t cpu, mem;
		uint8_t n_empty, block, mig, host;
		bool dirty, any;
	} tmax[CNL_CATALOG_MAX_TYPES];
	/* Per shape, every node's capacity-only lower bound on the start
	 * time (GPU only), sorted.  Placements only raise the true bounds,
	 * so a cached one stays a lower bound; pre-emption clears it. */
	struct lb_cache *lbc;
	size_t n_lbc;
};

#define LBC_MAX 256

struct lb_ent {
	int64_t lb;
	uint32_t node;
};

struct lb_cache {
	uint64_t key;
	uint32_t n;
	struct lb_ent *v;
};

static int64_t runtime_of(const struct cyc *y, const struct cnl_job *j)
{
	return j->runtime_ms > 0 ? j->runtime_ms : y->s->cfg.default_runtime_ms;
}

/* What a deadline is checked against: the job's own run time, or none
 * (it must start by then) when it gave none.  Capacity is still planned
 * with runtime_of(). */
static int64_t deadline_runtime(const struct cnl_job *j)
{
	return j->runtime_ms > 0 ? j->runtime_ms : 0;
}

static uint64_t hash64(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

/* The shape of a request for the caches: everything but CPU and memory. */
static uint64_t shape_key(const struct cnl_req_prep *p, bool with_project)
{
	const struct cnl_alloc_req *r = &p->req;
	uint64_t h = hash64(0, (uint64_t)r->kind);

	h = hash64(h, (uint64_t)r->blocks);
	h = hash64(h, (uint64_t)r->gpus);
	h = hash64(h, p->type_ok);
	for (int t = 0; t < CNL_CATALOG_MAX_TYPES; t += 8) {
		uint64_t w = 0;
		memcpy(&w, &p->prof[t], 8);
		h = hash64(h, w);
	}
	if (with_project)
		h = hash64(h, r->project);
	return h | 1;
}

static uint64_t fail_key(const struct cnl_req_prep *p)
{
	/* Block requests depend on their project (tenant rules). */
	return shape_key(p, p->req.kind == CNL_REQ_BLOCKS);
}

static bool fail_known_in(const struct fail_ent *tab, uint64_t k,
                          const struct cnl_req_prep *p)
{
	for (unsigned i = 0, h = (unsigned)(k % FAIL_SLOTS); i < FAIL_SLOTS;
	     i++, h = (h + 1) % FAIL_SLOTS) {
		const struct fail_ent *e = &tab[h];
		if (!e->key)
			return false;
		if (e->key != k)
			continue;
		for (int q = 0; q < e->n; q++)
			if (p->req.cpu_milli >= e->cpu[q] &&
			    p->req.mem_mib >= e->mem[q])
				return true;
		return false;
	}
	return false;
}

static void fail_note_in(struct fail_ent *tab, uint64_t k,
                         const struct cnl_req_prep *p)
{
	for (unsigned i = 0, h = (unsigned)(k % FAIL_SLOTS); i < FAIL_SLOTS;
	     i++, h = (h + 1) % FAIL_SLOTS) {
		struct fail_ent *e = &tab[h];
		if (e->key && e->key != k)
			continue;
		e->key = k;
		if (e->n < FAIL_PAIRS) {
			e->cpu[e->n] = p->req.cpu_milli;
			e->mem[e->n] = p->req.mem_mib;
			e->n++;
		}
		return;
	}
}

static bool fail_known(const struct cyc *y, const struct cnl_req_prep *p)
{
	return fail_known_in(y->fail, fail_key(p), p);
}

static void fail_note(struct cyc *y, const struct cnl_req_prep *p)
{
	fail_note_in(y->fail, fail_key(p), p);
}

static void fail_clear(struct cyc *y)
{
	memset(y->fail, 0, FAIL_SLOTS * sizeof(*y->fail));
	memset(y->pfail, 0, FAIL_SLOTS * sizeof(*y->pfail));
}

/* ---- per-type maxima -------------------------------------------------- */

static void tmax_refresh(struct cyc *y, int t)
{
	struct type_max *m = &y->tmax[t];
	const struct cnl_cluster *c = y->c;

	memset(m, 0, sizeof(*m));
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node_hot *h = &c->hot[i];
		if (h->state != CNL_NODE_UP || !h->n_gpus || h->gpu_type != t)
			continue;
		m->any = true;
		if (h->cpu_free > m->cpu)
			m->cpu = h->cpu_free;
		if (h->mem_free > m->mem)
			m->mem = h->mem_free;
		if (h->n_empty > m->n_empty)
			m->n_empty = h->n_empty;
		if (h->max_block_free > m->block)
			m->block = h->max_block_free;
		if (h->max_mig_free > m->mig)
			m->mig = h->max_mig_free;
		if (h->max_host_free > m->host)
			m->host = h->max_host_free;
	}
}

static void tmax_dirty(struct cyc *y, uint32_t node)
{
	if (y->c->nodes[node].n_gpus)
		y->tmax[y->c->nodes[node].gpu_type].dirty = true;
}

/* True when no node of the request's types could pass the allocator's
 * summary test (the same test as node_may_fit, on per-type maxima). */
static bool tmax_reject(struct cyc *y, const struct cnl_req_prep *p)
{
	const struct cnl_alloc_req *r = &p->req;

	if (r->kind == CNL_REQ_CPU)
		return false;
	for (int t = 0; t < y->c->cat->n; t++) {
		if (!(p->type_ok >> t & 1))
			continue;
		struct type_max *m = &y->tmax[t];
		if (m->dirty)
			tmax_refresh(y, t);
		if (!m->any || m->cpu < r->cpu_milli || m->mem < r->mem_mib)
			continue;
		int prof = p->prof[t];
		int need =
		    prof >= 0 ? y->c->cat->types[t].mig[prof].compute : 8;
		switch (r->kind) {
		case CNL_REQ_BLOCKS:
			if (r->blocks <= m->block)
				return false;
			if (prof >= 0 && r->blocks <= CNL_SMALL_BLOCKS_MAX &&
			    (r->blocks <= m->host || m->mig >= 1))
				return false;
			if (prof >= 0 && r->blocks > CNL_SMALL_BLOCKS_MAX &&
			    m->mig >= need)
				return false;
			break;
		case CNL_REQ_MIG:
			if (m->mig >= need)
				return false;
			break;
		case CNL_REQ_WHOLE:
			if (m->n_empty >= r->gpus)
				return false;
			break;
		default:
			return false;
		}
	}
	return true;
}

/* ---- running work per node ------------------------------------------- */

static int run_add(struct cnl_sched *s, uint32_t node, int64_t end,
                   uint32_t alloc_id, uint32_t job)
{
	struct cnl_run_vec *rv = &s->runs[node];
	uint32_t i;

	if (rv->n == rv->cap) {
		uint32_t cap = rv->cap ? rv->cap * 2 : 8;
		struct cnl_run *nv = realloc(rv->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		rv->v = nv;
		rv->cap = cap;
	}
	/* Kept sorted by (end, alloc id). */
	for (i = rv->n; i > 0; i--) {
		const struct cnl_run *q = &rv->v[i - 1];
		if (q->end_ms < end ||
		    (q->end_ms == end && q->alloc_id < alloc_id))
			break;
		rv->v[i] = rv->v[i - 1];
	}
	rv->v[i] =
	    (struct cnl_run){.end_ms = end, .alloc_id = alloc_id, .job = job};
	rv->n++;
	return 0;
}

static void run_del(struct cnl_sched *s, uint32_t node, uint32_t alloc_id)
{
	struct cnl_run_vec *rv = &s->runs[node];

	for (uint32_t i = 0; i < rv->n; i++)
		if (rv->v[i].alloc_id == alloc_id) {
			memmove(&rv->v[i], &rv->v[i + 1],
			        (rv->n - i - 1) * sizeof(rv->v[0]));
			rv->n--;
			return;
		}
}

/* ---- what-if ---------------------------------------------------------- */

struct saved {
	int n, cap;
	struct cnl_alloc *a;
};

static int save_free(struct cnl_cluster *c, struct saved *sv, uint32_t id)
{
	const struct cnl_alloc *a = cnl_alloc_get(c, id);

	if (!a)
		return -CNL_ENOALLOC;
	if (sv->n == sv->cap) {
		int cap = sv->cap ? sv->cap * 2 : 16;
		struct cnl_alloc *na =
		    realloc(sv->a, (size_t)cap * sizeof(*na));
		if (!na)
			return -ENOMEM;
		sv->a = na;
		sv->cap = cap;
	}
	sv->a[sv->n++] = *a;
	return cnl_alloc_free(c, id);
}

static void restore_all(struct cnl_cluster *c, struct saved *sv)
{
	while (sv->n > 0) {
		int r = cnl_alloc_restore(c, &sv->a[--sv->n]);
		(void)r; /* LIFO restores of what was just freed succeed */
	}
}

/*
 * The earliest time >= t_from at which job `p` fits on `node` by the ends
 * of the node's running work, on the real allocator state; T_INF if never
 * (within the work known to end).  Leaves the cluster as it was.
 */
static int64_t replay_fit(struct cyc *y, uint32_t node,
                          const struct cnl_req_prep *p, int64_t t_from,
                          struct saved *sv)
{
	const struct cnl_run_vec *rv = &y->s->runs[node];
	struct cnl_plan pl;
	int64_t t = T_INF;
	uint32_t i = 0;

	while (i < rv->n && rv->v[i].end_ms <= t_from)
		if (save_free(y->c, sv, rv->v[i++].alloc_id) < 0)
			goto out;
	if (cnl_alloc_plan_fast(y->c, p, node, &pl)) {
		t = t_from;
		goto out;
	}
	while (i < rv->n) {
		int64_t end = rv->v[i].end_ms;
		while (i < rv->n && rv->v[i].end_ms == end)
			if (save_free(y->c, sv, rv->v[i++].alloc_id) < 0)
				goto out;
		if (cnl_alloc_plan_fast(y->c, p, node, &pl)) {
			t = end;
			break;
		}
	}
out:
	restore_all(y->c, sv);
	return t;
}

/* Reservations on `node` overlapping [t0, t1). */
static const struct cnl_resv *
resv_overlap(const struct cnl_sched *s, uint32_t node, int64_t t0, int64_t t1)
{
	for (uint32_t i = s->resv_head[node]; i != NONE; i = s->resv[i].next) {
		const struct cnl_resv *r = &s->resv[i];
		if (r->t0 < t1 && t0 < r->t1)
			return r;
	}
	return NULL;
}

/* Earliest start on `node` that also keeps clear of the reservations
 * already there (a conservative rule: reservations on one node never
 * overlap in time). */
static int64_t node_earliest(struct cyc *y, uint32_t node,
                             const struct cnl_req_prep *p, int64_t rt,
                             int64_t lower_bound, struct saved *sv)
{
	/* Nothing fits before the lower bound: start the replay there. */
	int64_t t = lower_bound > y->now ? lower_bound : y->now;

	for (size_t guard = 0; guard <= y->s->n_resv; guard++) {
		const struct cnl_resv *r;
		t = replay_fit(y, node, p, t, sv);
		if (t == T_INF)
			return T_INF;
		r = resv_overlap(y->s, node, t, t + rt);
		if (!r)
			return t;
		t = r->t1;
	}
	return T_INF;
}

struct cap_view {
	int64_t cpu, mem;
	int n_gpus;
	int freeb[CNL_NODE_MAX_GPUS];
	int left[CNL_NODE_MAX_GPUS]; /* allocations still on the GPU */
};

static bool cap_fits(const struct cap_view *cv, const struct cnl_alloc_req *r,
                     int need)
{
	int empty = 0;

	if (cv->cpu < r->cpu_milli || cv->mem < r->mem_mib)
		return false;
	if (r->kind == CNL_REQ_CPU)
		return true;
	for (int g = 0; g < cv->n_gpus; g++) {
		if (r->kind != CNL_REQ_WHOLE && cv->freeb[g] >= need)
			return true;
		empty += cv->freeb[g] >= CNL_BLOCKS_PER_GPU;
	}
	return r->kind == CNL_REQ_WHOLE && empty >= r->gpus;
}

/* The node's free capacity as the capacity-only reasoning sees it, and
 * the GPU blocks `p` needs on one GPU. */
static int cap_view_init(const struct cyc *y, uint32_t node,
                         const struct cnl_req_prep *p, bool gpu_only,
                         struct cap_view *cv)
{
	const struct cnl_cluster *c = y->c;
	const struct cnl_node *n = &c->nodes[node];
	const struct cnl_alloc_req *r = &p->req;

	cv->cpu = gpu_only ? INT64_MAX / 2 : n->cpu_total - n->cpu_used;
	cv->mem = gpu_only ? INT64_MAX / 2 : n->mem_total - n->mem_used;
	cv->n_gpus = n->n_gpus;
	for (int g = 0; g < n->n_gpus; g++) {
		cv->freeb[g] = cnl_gpu_free_blocks(c, node, g);
		cv->left[g] = n->gpus[g].n_allocs;
	}
	if (r->kind == CNL_REQ_BLOCKS)
		return r->blocks;
	if (r->kind == CNL_REQ_MIG && p->prof[n->gpu_type] >= 0)
		return CNL_BLOCKS_PER_GPU *
		       c->cat->types[n->gpu_type]
		           .mig[p->prof[n->gpu_type]]
		           .compute /
		       CNL_MIG_COMPUTE_SLICES;
	return 0;
}

/* Give allocation `id` back to the view. */
static void cap_view_release(const struct cnl_cluster *c, struct cap_view *cv,
                             uint32_t id)
{
	const struct cnl_alloc *a = cnl_alloc_get(c, id);

	if (!a)
		return;
	cv->cpu += a->cpu_milli;
	cv->mem += a->mem_mib;
	if (a->kind == CNL_PLACE_WHOLE) {
		for (int g = 0; g < cv->n_gpus; g++)
			if (a->gpu_mask >> g & 1) {
				cv->freeb[g] = CNL_BLOCKS_PER_GPU;
				cv->left[g] = 0;
			}
	} else if (a->kind != CNL_PLACE_CPU) {
		/* Rounding of MIG shares must not make an empty GPU look
		 * less than empty. */
		cv->freeb[a->gpu] += cnl_alloc_blocks_held(c, a);
		if (--cv->left[a->gpu] <= 0)
			cv->freeb[a->gpu] = CNL_BLOCKS_PER_GPU;
	}
}

/* A capacity-only lower bound on node_earliest(): CPU, memory and GPU
 * blocks return as work ends, without the allocator's placement rules. */
static int64_t node_lower_bound(const struct cyc *y, uint32_t node,
                                const struct cnl_req_prep *p, bool gpu_only)
{
	const struct cnl_run_vec *rv = &y->s->runs[node];
	struct cap_view cv;
	int need = cap_view_init(y, node, p, gpu_only, &cv);
	uint32_t i = 0;

	if (cap_fits(&cv, &p->req, need))
		return y->now;
	while (i < rv->n) {
		int64_t end = rv->v[i].end_ms;
		for (; i < rv->n && rv->v[i].end_ms == end; i++)
			cap_view_release(y->c, &cv, rv->v[i].alloc_id);
		if (cap_fits(&cv, &p->req, need))
			return end;
	}
	return T_INF;
}

/* Could `p` ever run on node `i` (empty, of its type, big enough)? */
static bool node_could_host(const struct cyc *y, uint32_t i,
                            const struct cnl_req_prep *p)
{
	const struct cnl_node *n = &y->c->nodes[i];
	const struct cnl_alloc_req *r = &p->req;

	if (n->state != CNL_NODE_UP || n->cpu_total < r->cpu_milli ||
	    n->mem_total < r->mem_mib)
		return false;
	if (r->kind == CNL_REQ_CPU)
		return true;
	if (n->n_gpus == 0 || !(p->type_ok >> n->gpu_type & 1))
		return false;
	if (r->kind == CNL_REQ_WHOLE)
		return n->n_gpus >= r->gpus;
	if (r->kind == CNL_REQ_MIG)
		return p->prof[n->gpu_type] >= 0;
	return true;
}

static bool could_ever_fit(const struct cyc *y, const struct cnl_req_prep *p)
{
	const struct cnl_alloc_req *r = &p->req;

	if (r->kind == CNL_REQ_CPU)
		return r->cpu_milli <= y->max_cpu && r->mem_mib <= y->max_mem;
	for (int t = 0; t < y->c->cat->n; t++) {
		if (!(p->type_ok >> t & 1) || !y->type_gpus[t])
			continue;
		if (r->kind == CNL_REQ_MIG && p->prof[t] < 0)
			continue;
		if (r->kind == CNL_REQ_WHOLE && y->type_gpus[t] < r->gpus)
			continue;
		if (y->type_cpu[t] >= r->cpu_milli &&
		    y->type_mem[t] >= r->mem_mib)
			return true;
	}
	return false;
}

static int cmp_lb(const void *a, const void *b)
{
	const struct lb_ent *x = a, *y = b;
	if (x->lb != y->lb)
		return x->lb < y->lb ? -1 : 1;
	return (x->node > y->node) - (x->node < y->node);
}

/* The sorted lower bounds for the shape of `p` (see struct lb_cache);
 * NULL on allocation failure. */
static const struct lb_cache *bounds(struct cyc *y,
                                     const struct cnl_req_prep *p)
{
	uint64_t key = shape_key(p, false);
	struct lb_cache tmp = {.key = key};
	struct cnl_cluster *c = y->c;

	for (size_t i = 0; i < y->n_lbc; i++)
		if (y->lbc[i].key == key)
			return &y->lbc[i];
	tmp.v = malloc((c->n_nodes + 1) * sizeof(*tmp.v));
	if (!tmp.v)
		return NULL;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		if (n->state != CNL_NODE_UP)
			continue;
		if (p->req.kind != CNL_REQ_CPU &&
		    (!n->n_gpus || !(p->type_ok >> n->gpu_type & 1)))
			continue;
		int64_t lb = node_lower_bound(y, i, p, true);
		if (lb != T_INF)
			tmp.v[tmp.n++] = (struct lb_ent){lb, i};
	}
	qsort(tmp.v, tmp.n, sizeof(*tmp.v), cmp_lb);
	if (y->n_lbc == LBC_MAX) {
		/* Full: recycle the oldest entry. */
		free(y->lbc[0].v);
		memmove(&y->lbc[0], &y->lbc[1],
		        (LBC_MAX - 1) * sizeof(y->lbc[0]));
		y->n_lbc--;
	}
	y->lbc[y->n_lbc] = tmp;
	return &y->lbc[y->n_lbc++];
}

static void bounds_clear(struct cyc *y)
{
	for (size_t i = 0; i < y->n_lbc; i++)
		free(y->lbc[i].v);
	y->n_lbc = 0;
}

/* The earliest time and node at which job `p` could start, honouring the
 * reservations already made.  T_INF when none is known.  Nodes are tried
 * in order of their lower bound until the bound passes the best exact
 * time found: usually the first node or two settle it. */
static int64_t earliest(struct cyc *y, const struct cnl_req_prep *p, int64_t rt,
                        uint32_t *ret_node)
{
	const struct lb_cache *lc = bounds(y, p);
	struct saved sv = {0};
	int64_t best = T_INF;
	uint32_t best_node = NONE;

	for (uint32_t k = 0; lc && k < lc->n && lc->v[k].lb < best; k++) {
		uint32_t node = lc->v[k].node;
		if (!node_could_host(y, node, p))
			continue;
		int64_t t = node_earliest(y, node, p, rt, lc->v[k].lb, &sv);
		if (t < best) {
			best = t;
			best_node = node;
		}
	}
	free(sv.a);
	*ret_node = best_node;
	return best;
}

/* The estimated start of a waiting job: the first lower bound among the
 * nodes that could host it (GPU capacity as work ends). */
static int64_t estimate(struct cyc *y, const struct cnl_req_prep *p)
{
	const struct lb_cache *lc = bounds(y, p);

	for (uint32_t k = 0; lc && k < lc->n; k++)
		if (node_could_host(y, lc->v[k].node, p))
			return lc->v[k].lb;
	return T_INF;
}

/* ---- placement -------------------------------------------------------- */

#define TOPK_MAX 32

struct cand {
	double score;
	struct cnl_plan plan;
};

static int commit_plan(struct cnl_cluster *c, const struct cnl_req_prep *p,
                       const struct cnl_plan *plan, uint32_t *ret_id)
{
	struct cnl_plan pl = *plan;

	cnl_alloc_plan_masks(c, &pl);
	return cnl_alloc_commit(c, p, &pl, ret_id);
}

/*
 * Backfill rule: may `p` (ending at `end`) start now by `plan` without
 * delaying any reservation on the plan's node?  Yes if it ends before
 * each, or if each reserved job still fits at its time beside it.
 */
static bool resv_ok(struct cyc *y, const struct cnl_req_prep *p,
                    const struct cnl_plan *plan, int64_t end)
{
	struct cnl_sched *s = y->s;
	struct saved sv = {0};
	uint32_t id = 0;
	bool ok = true, placed = false;

	for (uint32_t i = s->resv_head[plan->node]; i != NONE && ok;
	     i = s->resv[i].next) {
		const struct cnl_resv *r = &s->resv[i];
		if (end <= r->t0)
			continue;
		if (!placed) {
			if (commit_plan(y->c, p, plan, &id) < 0) {
				ok = false;
				break;
			}
			placed = true;
		}
		/* The tentative allocation is not in the node's run list,
		 * so the replay keeps it: it outlives the reservation. */
		ok = replay_fit(y, r->node, &y->prep[r->job], r->t0, &sv) <=
		     r->t0;
	}
	if (placed)
		cnl_alloc_free(y->c, id);
	free(sv.a);
	return ok;
}

static void top_insert(struct cand *top, int *nt, int k, double score,
                       const struct cnl_plan *plan)
{
	int i;

	if (*nt == k) {
		if (score >= top[k - 1].score)
			return; /* ties keep the earlier node */
		i = k - 1;
	} else {
		i = (*nt)++;
	}
	while (i > 0 && top[i - 1].score > score) {
		top[i] = top[i - 1];
		i--;
	}
	top[i].score = score;
	top[i].plan = *plan;
}

/* Whether a member of the gang being placed already took `node`. */
static bool on_gang_node(const struct cnl_sched *s, uint32_t node)
{
	for (int i = 0; i < s->n_gang_nodes; i++)
		if (s->gang_nodes[i] == node)
			return true;
	return false;
}

/* The best node for pending job `job` now; false when none.  *conflict
 * is set when some node was passed over only for a reservation.  A member
 * of a spread gang skips the nodes its gang already took. */
static bool search(struct cyc *y, uint32_t job, struct cnl_plan *ret,
                   bool *conflict)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_req_prep *p = &y->prep[job];
	struct cnl_cluster *c = y->c;
	struct cand top[TOPK_MAX];
	int nt = 0, k = y->s->pol->refine ? cfg->frag_candidates : 1;
	int64_t end = y->now + runtime_of(y, j);
	/* A lower bound on any empty node's score, when the policy has one. */
	double open_node =
	    !y->s->pol->score
	        ? CNL_SCORE_OPEN_NODE
	        : (y->s->pol->pack_bound ? cfg->w_pack * CNL_SCORE_OPEN_NODE
	                                 : -INFINITY);

	*conflict = false;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct cnl_plan pl;
		if (!cnl_alloc_may_fit(c, i, p))
			continue;
		if (j->gang && j->spread && on_gang_node(y->s, i))
			continue; /* a node per member */
		if (nt == k && c->hot[i].n_allocs == 0 &&
		    open_node >= top[k - 1].score)
			continue;
		if (!cnl_alloc_plan_fast(c, p, i, &pl))
			continue;
		if (y->s->resv_head[i] != NONE && !resv_ok(y, p, &pl, end)) {
			*conflict = true;
			continue;
		}
		top_insert(top, &nt, k, cnl_policy_score(&y->v, j, &pl), &pl);
		if (nt == k && top[k - 1].score <= 0)
			break; /* nothing can beat k perfect fits */
	}
	if (nt == 0)
		return false;
	int best = 0;
	if (nt > 1 && y->s->pol->refine) {
		/* Refine the best few (fragmentation growth for cnlab). */
		double best_sc = 0;
		for (int i = 0; i < nt; i++) {
			double sc = cnl_policy_refine(&y->v, j, &top[i].plan,
			                              top[i].score);
			if (i == 0 || sc < best_sc) {
				best_sc = sc;
				best = i;
			}
		}
	}
	*ret = top[best].plan;
	return true;
}

static void team_hold(struct cyc *y, uint32_t project, int64_t blocks)
{
	struct cnl_team *t = cnl_sched_team_find(y->s, project);

	if (!t)
		return;
	t->held_blocks += blocks;
	t->factor = cnl_fs_factor(t->u_hist,
	                          y->v.capacity_blocks
	                              ? (double)t->held_blocks /
	                                    (double)y->v.capacity_blocks
	                              : 0,
	                          t->share);
}

/* Commit job `job` by `plan`: the allocation, its run entry, its team. */
static int start_job(struct cyc *y, uint32_t job, const struct cnl_plan *plan,
                     int64_t start, uint32_t *ret_id)
{
	const struct cnl_job *j = &y->jobs[job];
	uint32_t id;
	int r;

	r = commit_plan(y->c, &y->prep[job], plan, &id);
	if (r < 0)
		return r;
	tmax_dirty(y, plan->node);
	r = run_add(y->s, plan->node, start + runtime_of(y, j), id, job);
	if (r < 0) {
		cnl_alloc_free(y->c, id);
		return r;
	}
	team_hold(y, j->req.project,
	          cnl_alloc_blocks_held(y->c, cnl_alloc_get(y->c, id)));
	*ret_id = id;
	return 0;
}

static int decide(struct cyc *y, uint32_t job, enum cnl_dec_kind kind,
                  enum cnl_reason why, uint32_t node, uint32_t alloc_id,
                  int64_t at, int err)
{
	struct cnl_decision d = {.kind = (uint8_t)kind,
	                         .reason = (uint8_t)why,
	                         .job = job,
	                         .node = node,
	                         .alloc_id = alloc_id,
	                         .for_job = NONE,
	                         .at_ms = at == T_INF ? -1 : at,
	                         .error = err};

	y->done[job] = 1;
	return push(y->out, &d);
}

/* Try to start `job` now.  1 started, 0 not, < 0 error. */
static int try_start(struct cyc *y, uint32_t job, bool *conflict)
{
	const struct cnl_req_prep *p = &y->prep[job];
	struct cnl_plan plan;
	uint32_t id;
	int r;

	*conflict = false;
	if (tmax_reject(y, p) || fail_known(y, p))
		return 0;
	if (!search(y, job, &plan, conflict)) {
		if (!*conflict)
			fail_note(y, p);
		return 0;
	}
	r = start_job(y, job, &plan, y->now, &id);
	if (r < 0)
		return r;
	return decide(y, job, CNL_DEC_START,
	              y->s->n_resv ? CNL_WHY_BACKFILLED : CNL_WHY_STARTED,
	              plan.node, id, y->now, 0) < 0
	           ? -ENOMEM
	           : 1;
}

/* ---- pre-emption ------------------------------------------------------ */

#define VICTIMS_MAX 12

struct vset {
	int n;
	uint32_t job[VICTIMS_MAX];
	int max_prio;
	int64_t lost;
	uint32_t node;
};

static int64_t work_lost(const struct cyc *y, const struct cnl_job *v)
{
	int64_t since =
	    v->checkpoint_ms > v->start_ms ? v->checkpoint_ms : v->start_ms;
	return y->now > since ? y->now - since : 0;
}

static bool vset_better(const struct vset *a, const struct vset *b)
{
	if (b->n == 0)
		return true;
	if (a->n != b->n)
		return a->n < b->n;
	if (a->max_prio != b->max_prio)
		return a->max_prio < b->max_prio;
	if (a->lost != b->lost)
		return a->lost < b->lost;
	return a->node < b->node;
}

/* Does `p` fit on `node` with the victims in `pick` released? */
static bool fits_without(struct cyc *y, uint32_t node,
                         const struct cnl_req_prep *p, const uint32_t *jobs,
                         int n, struct saved *sv)
{
	struct cnl_plan pl;
	bool ok = true;

	for (int i = 0; i < n && ok; i++)
		ok = save_free(y->c, sv, y->jobs[jobs[i]].alloc_id) == 0;
	ok = ok && cnl_alloc_plan_fast(y->c, p, node, &pl);
	restore_all(y->c, sv);
	return ok;
}

static int cmp_victim_ctx_prio(const struct cyc *y, uint32_t a, uint32_t b)
{
	const struct cnl_job *x = &y->jobs[a], *z = &y->jobs[b];
	int64_t la, lb;

	if (x->prio != z->prio)
		return x->prio < z->prio ? -1 : 1;
	la = work_lost(y, x);
	lb = work_lost(y, z);
	if (la != lb)
		return la < lb ? -1 : 1;
	return (a > b) - (a < b);
}

/* The smallest victim set on `node` for `job`, by the order of cand[]
 * (cheapest first); false when even all of them are not enough. */
static bool node_victims(struct cyc *y, uint32_t node,
                         const struct cnl_req_prep *p, const uint32_t *cand,
                         int m, int min_size, int max_size, struct vset *ret,
                         struct saved *sv)
{
	uint32_t pick[VICTIMS_MAX];
	int idx[VICTIMS_MAX];

	if (!fits_without(y, node, p, cand, m, sv))
		return false;
	for (int k = min_size > 1 ? min_size : 1; k <= m && k <= max_size;
	     k++) {
		for (int i = 0; i < k; i++)
			idx[i] = i;
		for (;;) {
			for (int i = 0; i < k; i++)
				pick[i] = cand[idx[i]];
			if (fits_without(y, node, p, pick, k, sv)) {
				ret->n = k;
				ret->node = node;
				ret->max_prio = 0;
				ret->lost = 0;
				for (int i = 0; i < k; i++) {
					const struct cnl_job *v =
					    &y->jobs[pick[i]];
					ret->job[i] = pick[i];
					if (v->prio > ret->max_prio)
						ret->max_prio = v->prio;
					ret->lost += work_lost(y, v);
				}
				return true;
			}
			/* Next combination in lexicographic order. */
			int i = k - 1;
			while (i >= 0 && idx[i] == m - k + i)
				i--;
			if (i < 0)
				break;
			idx[i]++;
			for (int q = i + 1; q < k; q++)
				idx[q] = idx[q - 1] + 1;
		}
	}
	return false;
}

/* A node's victims as capacity alone sees them: the cheapest prefix of
 * its candidates that makes room.  A lower bound on the exact answer. */
struct vest {
	uint32_t node;
	int m, k, max_prio;
	int64_t lost;
	uint32_t cand[VICTIMS_MAX];
};

static int cmp_vest(const void *a, const void *b)
{
	const struct vest *x = a, *z = b;

	if (x->k != z->k)
		return x->k < z->k ? -1 : 1;
	if (x->max_prio != z->max_prio)
		return x->max_prio < z->max_prio ? -1 : 1;
	if (x->lost != z->lost)
		return x->lost < z->lost ? -1 : 1;
	return (x->node > z->node) - (x->node < z->node);
}

/* Pre-empt for `job` if victims exist.  1 done, 0 no, < 0 error.  Nodes
 * are examined in order of their capacity-only estimate, and the exact
 * search stops once no estimate left can beat the best set found. */
static int try_preempt(struct cyc *y, uint32_t job)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_req_prep *p = &y->prep[job];
	struct cnl_cluster *c = y->c;
	struct vset best = {0}, vs;
	struct saved sv = {0};
	struct vest *ests;
	size_t n_est = 0;
	int r;

	size_t avail = 0;
	for (int q = 0; q + cfg->preempt_class_gap <= j->prio; q++)
		avail += y->victims_by_prio[q];
	if (!avail)
		return 0;
	uint64_t pk = fail_key(p) ^ (0x51ed270b27b5aa3bULL * (j->prio + 1u));
	if (fail_known_in(y->pfail, pk | 1, p))
		return 0;
	ests = malloc((y->n_victim_nodes + 1) * sizeof(*ests));
	if (!ests)
		return -ENOMEM;
	for (size_t vn = 0; vn < y->n_victim_nodes; vn++) {
		uint32_t node = y->victim_nodes[vn];
		struct vest *e = &ests[n_est];
		int m = 0;
		if (!node_could_host(y, node, p))
			continue;
		/* The node's list is cheapest first and by class: take
		 * the unused ones of low enough class. */
		for (uint32_t i = y->vl_off[vn];
		     i < y->vl_off[vn + 1] && m < VICTIMS_MAX; i++) {
			uint32_t vj = y->vl_jobs[i];
			if (y->jobs[vj].prio + cfg->preempt_class_gap > j->prio)
				break;
			if (!y->victim[vj])
				e->cand[m++] = vj;
		}
		if (m == 0)
			continue;
		/* The cheapest prefix that frees enough, by capacity. */
		struct cap_view cv;
		int need = cap_view_init(y, node, p, false, &cv);
		e->node = node;
		e->m = m;
		e->k = 0;
		e->max_prio = 0;
		e->lost = 0;
		for (int i = 0; i < m && !e->k; i++) {
			const struct cnl_job *v = &y->jobs[e->cand[i]];
			cap_view_release(c, &cv, v->alloc_id);
			if (v->prio > e->max_prio)
				e->max_prio = v->prio;
			e->lost += work_lost(y, v);
			if (cap_fits(&cv, &p->req, need))
				e->k = i + 1;
		}
		if (e->k)
			n_est++;
	}
	for (size_t i = 0; i < n_est; i++) {
		/* Lazily in estimate order: the first few by selection, the
		 * rest sorted only if the search goes on that long. */
		if (i < 4) {
			size_t mi = i;
			for (size_t q = i + 1; q < n_est; q++)
				if (cmp_vest(&ests[q], &ests[mi]) < 0)
					mi = q;
			struct vest tmp = ests[i];
			ests[i] = ests[mi];
			ests[mi] = tmp;
		} else if (i == 4) {
			qsort(ests + i, n_est - i, sizeof(*ests), cmp_vest);
		}
		const struct vest *e = &ests[i];
		if (best.n &&
		    (e->k > best.n ||
		     (e->k == best.n && (e->max_prio > best.max_prio ||
		                         (e->max_prio == best.max_prio &&
		                          e->lost >= best.lost)))))
			break;
		if (node_victims(y, e->node, p, e->cand, e->m, e->k,
		                 best.n ? best.n : VICTIMS_MAX, &vs, &sv) &&
		    vset_better(&vs, &best))
			best = vs;
	}
	free(ests);
	free(sv.a);
	if (best.n == 0) {
		fail_note_in(y->pfail, pk | 1, p);
		return 0;
	}
	/* Release the victims for real and start the job after the grace. */
	int64_t kill = y->now + cfg->grace_ms;
	for (int i = 0; i < best.n; i++) {
		const struct cnl_job *v = &y->jobs[best.job[i]];
		const struct cnl_alloc *a = cnl_alloc_get(c, v->alloc_id);
		int64_t held = a ? cnl_alloc_blocks_held(c, a) : 0;
		run_del(y->s, best.node, v->alloc_id);
		if ((r = cnl_alloc_free(c, v->alloc_id)) < 0)
			return r;
		team_hold(y, v->req.project, -held);
		y->victim[best.job[i]] = 1;
		y->victims_by_prio[v->prio]--;
		struct cnl_decision d = {.kind = CNL_DEC_PREEMPT,
		                         .reason = CNL_WHY_PREEMPTED,
		                         .job = best.job[i],
		                         .node = best.node,
		                         .alloc_id = v->alloc_id,
		                         .for_job = job,
		                         .at_ms = y->now,
		                         .kill_ms = kill};
		if (push(y->out, &d) < 0)
			return -ENOMEM;
	}
	fail_clear(y);
	bounds_clear(y);
	tmax_dirty(y, best.node);
	struct cnl_plan plan;
	uint32_t id;
	if (!cnl_alloc_plan_fast(c, p, best.node, &plan))
		return -EINVAL; /* cannot happen: fits_without said so */
	if ((r = start_job(y, job, &plan, kill, &id)) < 0)
		return r;
	return decide(y, job, CNL_DEC_START, CNL_WHY_AFTER_PREEMPTION,
	              best.node, id, kill, 0) < 0
	           ? -ENOMEM
	           : 1;
}

/* ---- reservations ----------------------------------------------------- */

static int reserve(struct cyc *y, uint32_t job, uint32_t node, int64_t t0,
                   int64_t rt)
{
	struct cnl_sched *s = y->s;

	if (s->n_resv == s->cap_resv) {
		size_t cap = s->cap_resv ? s->cap_resv * 2 : 16;
		struct cnl_resv *nr = realloc(s->resv, cap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		s->resv = nr;
		s->cap_resv = cap;
	}
	s->resv[s->n_resv] = (struct cnl_resv){.job = job,
	                                       .node = node,
	                                       .next = s->resv_head[node],
	                                       .t0 = t0,
	                                       .t1 = t0 + rt};
	s->resv_head[node] = (uint32_t)s->n_resv++;
	return 0;
}

/* A pending job that could not start now. */
static int blocked(struct cyc *y, uint32_t job, bool conflict)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_req_prep *p = &y->prep[job];
	int64_t rt = runtime_of(y, j), drt = deadline_runtime(j), t;
	uint32_t node = NONE;
	int r;

	if (!could_ever_fit(y, p))
		return decide(y, job, CNL_DEC_WAIT, CNL_WHY_NO_MATCHING_NODE,
		              NONE, 0, T_INF, 0);
	if (j->deadline_ms) {
		t = earliest(y, p, rt, &node);
		if (y->now + drt <= j->deadline_ms) {
			if (t != T_INF && t + drt <= j->deadline_ms) {
				if ((r = reserve(y, job, node, t, rt)) < 0)
					return r;
				return decide(y, job, CNL_DEC_WAIT,
				              CNL_WHY_RESERVED, node, 0, t, 0);
			}
			/* Waiting misses the deadline: pre-empt.  (Nothing
			 * changes when no victims are found, so t stands.) */
			if ((r = try_preempt(y, job)) != 0)
				return r < 0 ? r : 0;
		}
		if (t != T_INF && (r = reserve(y, job, node, t, rt)) < 0)
			return r;
		return decide(y, job, CNL_DEC_WAIT, CNL_WHY_DEADLINE_INFEASIBLE,
		              node, 0, t, 0);
	}
	if ((r = try_preempt(y, job)) != 0)
		return r < 0 ? r : 0;
	if (y->n_resv_plain < (size_t)cfg->max_reservations) {
		t = earliest(y, p, rt, &node);
		if (t != T_INF) {
			if ((r = reserve(y, job, node, t, rt)) < 0)
				return r;
			y->n_resv_plain++;
			return decide(y, job, CNL_DEC_WAIT, CNL_WHY_RESERVED,
			              node, 0, t, 0);
		}
	}
	return decide(y, job, CNL_DEC_WAIT,
	              conflict ? CNL_WHY_BEHIND_RESERVATION
	                       : CNL_WHY_NO_CAPACITY,
	              NONE, 0, estimate(y, p), 0);
}

/* ---- gangs ------------------------------------------------------------ */

/* All of a gang's members start now, or none does. */
static int start_gang(struct cyc *y, const uint32_t *members, size_t n,
                      size_t size)
{
	struct cnl_sched *s = y->s;
	uint32_t ids[CNL_NODE_MAX_GPUS * 4], nodes[CNL_NODE_MAX_GPUS * 4];
	size_t placed = 0;
	bool conflict = false;
	int r = 0;

	if (n != size || n > sizeof(ids) / sizeof(ids[0])) {
		for (size_t i = 0; i < n; i++)
			if ((r = decide(y, members[i], CNL_DEC_WAIT,
			                CNL_WHY_GANG_INCOMPLETE, NONE, 0, T_INF,
			                0)) < 0)
				return r;
		return 0;
	}
	s->n_gang_nodes = 0;
	for (; placed < n; placed++) {
		struct cnl_plan plan;
		bool c1;
		if (!search(y, members[placed], &plan, &c1)) {
			conflict |= c1;
			break;
		}
		if ((r = start_job(y, members[placed], &plan, y->now,
		                   &ids[placed])) < 0)
			break;
		nodes[placed] = plan.node;
		s->gang_nodes[s->n_gang_nodes++] = plan.node;
	}
	s->n_gang_nodes = 0;
	if (placed == n) {
		for (size_t i = 0; i < n; i++)
			if (decide(y, members[i], CNL_DEC_START,
			           s->n_resv ? CNL_WHY_BACKFILLED
			                     : CNL_WHY_STARTED,
			           nodes[i], ids[i], y->now, 0) < 0)
				return -ENOMEM;
		return 0;
	}
	/* Roll back the members already placed. */
	while (placed-- > 0) {
		const struct cnl_alloc *a = cnl_alloc_get(y->c, ids[placed]);
		team_hold(y, y->jobs[members[placed]].req.project,
		          -(int64_t)cnl_alloc_blocks_held(y->c, a));
		run_del(s, nodes[placed], ids[placed]);
		cnl_alloc_free(y->c, ids[placed]);
		tmax_dirty(y, nodes[placed]);
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		if (decide(y, members[i], CNL_DEC_WAIT, CNL_WHY_GANG_INCOMPLETE,
		           NONE, 0, estimate(y, &y->prep[members[i]]), 0) < 0)
			return -ENOMEM;
	(void)conflict;
	return 0;
}

/* ---- the cycle -------------------------------------------------------- */

struct queue {
	uint32_t project;
	size_t pos, end; /* into the ordered array */
	double key;      /* of the head */
};

struct order_ent {
	uint32_t job;
	uint8_t prio;
	uint32_t project;
	double key;
	int64_t submit;
};

static int cmp_order(const void *a, const void *b)
{
	const struct order_ent *x = a, *y = b;

	if (x->prio != y->prio)
		return x->prio > y->prio ? -1 : 1;
	if (x->project != y->project)
		return x->project < y->project ? -1 : 1;
	if (x->key != y->key)
		return x->key > y->key ? -1 : 1;
	if (x->submit != y->submit)
		return x->submit < y->submit ? -1 : 1;
	return (x->job > y->job) - (x->job < y->job);
}

static int setup_teams(struct cyc *y)
{
	struct cnl_sched *s = y->s;
	uint32_t *ps = malloc((y->n_jobs + 1) * sizeof(*ps));
	size_t n = 0;
	double wsum = 0;

	if (!ps)
		return -ENOMEM;
	for (size_t i = 0; i < y->n_jobs; i++)
		ps[n++] = y->jobs[i].req.project;
	qsort(ps, n, sizeof(*ps), cmp_u32);
	s->n_teams = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && ps[i] == ps[i - 1])
			continue;
		if (s->n_teams == s->cap_teams) {
			size_t cap = s->cap_teams ? s->cap_teams * 2 : 32;
			struct cnl_team *nt =
			    realloc(s->teams, cap * sizeof(*nt));
			if (!nt) {
				free(ps);
				return -ENOMEM;
			}
			s->teams = nt;
			s->cap_teams = cap;
		}
		struct cnl_team *t = &s->teams[s->n_teams++];
		memset(t, 0, sizeof(*t));
		t->project = ps[i];
		t->share = cnl_fs_weight(&s->fs, ps[i]);
		wsum += t->share;
		t->u_hist =
		    cnl_fs_usage(&s->fs, ps[i], y->now, y->v.capacity_blocks);
	}
	free(ps);
	for (size_t i = 0; i < s->n_teams; i++)
		s->teams[i].share = wsum > 0 ? s->teams[i].share / wsum : 1;
	/* What each team holds now. */
	for (size_t i = 0; i < y->n_jobs; i++) {
		const struct cnl_job *j = &y->jobs[i];
		const struct cnl_alloc *a;
		if (j->state != CNL_JOB_RUNNING)
			continue;
		a = cnl_alloc_get(y->c, j->alloc_id);
		if (a)
			cnl_sched_team_find(s, j->req.project)->held_blocks +=
			    cnl_alloc_blocks_held(y->c, a);
	}
	for (size_t i = 0; i < s->n_teams; i++)
		team_hold(y, s->teams[i].project, 0);
	return 0;
}

static int setup_runs(struct cyc *y)
{
	struct cnl_sched *s = y->s;
	uint32_t nn = y->c->n_nodes;

	if (s->n_runs < nn) {
		struct cnl_run_vec *nr = realloc(s->runs, nn * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		memset(nr + s->n_runs, 0, (nn - s->n_runs) * sizeof(*nr));
		s->runs = nr;
		s->n_runs = nn;
		int64_t *ni = realloc(s->idle_since, nn * sizeof(*ni));
		if (!ni)
			return -ENOMEM;
		memset(ni + s->n_idle, 0, (nn - s->n_idle) * sizeof(*ni));
		s->idle_since = ni;
		s->n_idle = nn;
	}
	uint32_t *nh = realloc(s->resv_head, (nn + 1) * sizeof(*nh));
	if (!nh)
		return -ENOMEM;
	s->resv_head = nh;
	for (uint32_t i = 0; i < nn; i++) {
		s->runs[i].n = 0;
		s->resv_head[i] = NONE;
	}
	for (size_t i = 0; i < y->n_jobs; i++) {
		const struct cnl_job *j = &y->jobs[i];
		const struct cnl_alloc *a;
		int64_t end;
		if (j->state != CNL_JOB_RUNNING)
			continue;
		a = cnl_alloc_get(y->c, j->alloc_id);
		if (!a)
			return -EINVAL;
		end = j->start_ms + runtime_of(y, j);
		if (end <= y->now)
			end = y->now + 1; /* overdue: expected any moment */
		if (run_add(s, a->node, end, j->alloc_id, (uint32_t)i) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* The running jobs pre-emption may take this cycle, per node, cheapest
 * first. */
static int setup_victims(struct cyc *y)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	size_t total = 0;

	y->victim_nodes = malloc((y->c->n_nodes + 1) * sizeof(uint32_t));
	y->vl_off = malloc((y->c->n_nodes + 2) * sizeof(uint32_t));
	y->vl_jobs = malloc((y->n_jobs + 1) * sizeof(uint32_t));
	if (!y->victim_nodes || !y->vl_off || !y->vl_jobs)
		return -ENOMEM;
	for (uint32_t n = 0; n < y->c->n_nodes; n++) {
		const struct cnl_run_vec *rv = &y->s->runs[n];
		size_t first = total;
		for (uint32_t i = 0; i < rv->n; i++) {
			uint32_t vj = rv->v[i].job;
			if (vj == NONE)
				continue;
			const struct cnl_job *v = &y->jobs[vj];
			if (v->state != CNL_JOB_RUNNING || !v->preemptible ||
			    v->prio > CNL_PRIO_CRITICAL ||
			    y->now - v->start_ms < cfg->min_run_ms)
				continue;
			y->victims_by_prio[v->prio]++;
			/* Insertion by (class, work lost, index). */
			size_t q = total++;
			while (q > first && cmp_victim_ctx_prio(
			                        y, y->vl_jobs[q - 1], vj) > 0) {
				y->vl_jobs[q] = y->vl_jobs[q - 1];
				q--;
			}
			y->vl_jobs[q] = vj;
		}
		if (total > first) {
			y->vl_off[y->n_victim_nodes] = (uint32_t)first;
			y->victim_nodes[y->n_victim_nodes++] = n;
		}
	}
	y->vl_off[y->n_victim_nodes] = (uint32_t)total;
	return 0;
}

static void setup_types(struct cyc *y)
{
	const struct cnl_cluster *c = y->c;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		if (n->state != CNL_NODE_UP)
			continue;
		if (n->cpu_total > y->max_cpu)
			y->max_cpu = n->cpu_total;
		if (n->mem_total > y->max_mem)
			y->max_mem = n->mem_total;
		if (!n->n_gpus)
			continue;
		y->v.capacity_blocks += (int64_t)n->n_gpus * CNL_BLOCKS_PER_GPU;
		int t = n->gpu_type;
		if (n->cpu_total > y->type_cpu[t])
			y->type_cpu[t] = n->cpu_total;
		if (n->mem_total > y->type_mem[t])
			y->type_mem[t] = n->mem_total;
		if (n->n_gpus > y->type_gpus[t])
			y->type_gpus[t] = n->n_gpus;
	}
}

static int cmp_gang(const void *a, const void *b, void *arg)
{
	const struct cnl_job *jobs = arg;
	uint32_t x = *(const uint32_t *)a, z = *(const uint32_t *)b;

	if (jobs[x].gang != jobs[z].gang)
		return jobs[x].gang < jobs[z].gang ? -1 : 1;
	return (x > z) - (x < z);
}

/* Process one pending job (or its whole gang). */
static int process(struct cyc *y, uint32_t job, const uint32_t *gangs,
                   size_t n_gangs)
{
	const struct cnl_job *j = &y->jobs[job];
	bool conflict;
	int r;

	if (j->gang) {
		/* Find the gang's members (sorted by gang id). */
		size_t lo = 0, hi = n_gangs;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (y->jobs[gangs[mid]].gang < j->gang)
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t e = lo;
		while (e < n_gangs && y->jobs[gangs[e]].gang == j->gang)
			e++;
		return start_gang(y, gangs + lo, e - lo, j->gang_size);
	}
	r = try_start(y, job, &conflict);
	if (r != 0)
		return r < 0 ? r : 0;
	return blocked(y, job, conflict);
}

static void power(struct cyc *y)
{
	struct cnl_sched *s = y->s;
	const struct cnl_cluster *c = y->c;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		if (n->n_allocs || n->state != CNL_NODE_UP) {
			s->idle_since[i] = 0;
			continue;
		}
		if (!s->idle_since[i])
			s->idle_since[i] = y->now;
		if (s->cfg.idle_power_down_ms &&
		    y->now - s->idle_since[i] >= s->cfg.idle_power_down_ms) {
			struct cnl_decision d = {.kind = CNL_DEC_POWER_DOWN,
			                         .reason = CNL_WHY_IDLE,
			                         .job = NONE,
			                         .node = i,
			                         .for_job = NONE,
			                         .at_ms = s->idle_since[i]};
			push(y->out, &d);
		}
	}
}

int cnl_sched_cycle(struct cnl_sched *s, struct cnl_cluster *c,
                    const struct cnl_job *jobs, size_t n_jobs, int64_t now_ms,
                    uint64_t seed, struct cnl_decisions *out)
{
	struct cyc y;
	struct order_ent *ord = NULL;
	struct queue *qs = NULL;
	uint32_t *gangs = NULL;
	size_t n_ord = 0, n_gangs = 0;
	int r;

	memset(&y, 0, sizeof(y));
	out->n = 0;
	y.s = s;
	y.c = c;
	y.jobs = jobs;
	y.n_jobs = n_jobs;
	y.now = now_ms;
	y.out = out;
	y.v = (struct cnl_sched_view){
	    .s = s, .c = c, .now_ms = now_ms, .seed = seed};
	s->n_resv = 0;
	s->n_gang_nodes = 0;
	setup_types(&y);
	y.prep = malloc((n_jobs + 1) * sizeof(*y.prep));
	y.done = calloc(n_jobs + 1, 1);
	y.victim = calloc(n_jobs + 1, 1);
	y.fail = calloc(FAIL_SLOTS, sizeof(*y.fail));
	y.pfail = calloc(FAIL_SLOTS, sizeof(*y.pfail));
	y.lbc = calloc(LBC_MAX, sizeof(*y.lbc));
	ord = malloc((n_jobs + 1) * sizeof(*ord));
	qs = malloc((n_jobs + 1) * sizeof(*qs));
	gangs = malloc((n_jobs + 1) * sizeof(*gangs));
	s->gang_nodes = realloc(s->gang_nodes,
	                        (CNL_NODE_MAX_GPUS * 4 + 1) * sizeof(uint32_t));
	if (!y.prep || !y.done || !y.victim || !y.fail || !y.pfail || !y.lbc ||
	    !ord || !qs || !gangs || !s->gang_nodes) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = setup_runs(&y)) < 0 || (r = setup_teams(&y)) < 0 ||
	    (r = setup_victims(&y)) < 0)
		goto out;
	for (int t = 0; t < CNL_CATALOG_MAX_TYPES; t++)
		y.tmax[t].dirty = true;

	/* Prepare every pending job; invalid ones are answered at once. */
	for (size_t i = 0; i < n_jobs; i++) {
		const struct cnl_job *j = &jobs[i];
		if (j->state != CNL_JOB_PENDING)
			continue;
		int e = cnl_alloc_prepare(c, &j->req, &y.prep[i]);
		if (e < 0 || j->prio > CNL_PRIO_CRITICAL) {
			if ((r = decide(&y, (uint32_t)i, CNL_DEC_WAIT,
			                CNL_WHY_INVALID, NONE, 0, T_INF,
			                e < 0 ? e : -EINVAL)) < 0)
				goto out;
			continue;
		}
		ord[n_ord++] =
		    (struct order_ent){.job = (uint32_t)i,
		                       .prio = j->prio,
		                       .project = j->req.project,
		                       .key = cnl_policy_order(&y.v, j),
		                       .submit = j->submit_ms};
		if (j->gang)
			gangs[n_gangs++] = (uint32_t)i;
	}
	qsort(ord, n_ord, sizeof(*ord), cmp_order);
	qsort_r(gangs, n_gangs, sizeof(*gangs), cmp_gang, (void *)jobs);

	/* Classes in turn; within a class, the team whose head has the
	 * highest key, recomputed after each of its placements. */
	for (size_t a = 0; a < n_ord;) {
		size_t b = a, nq = 0;
		while (b < n_ord && ord[b].prio == ord[a].prio)
			b++;
		for (size_t i = a; i < b;) {
			size_t e = i;
			while (e < b && ord[e].project == ord[i].project)
				e++;
			qs[nq++] = (struct queue){.project = ord[i].project,
			                          .pos = i,
			                          .end = e,
			                          .key = ord[i].key};
			i = e;
		}
		for (;;) {
			size_t best = nq;
			for (size_t q = 0; q < nq; q++)
				if (qs[q].pos < qs[q].end &&
				    (best == nq || qs[q].key > qs[best].key))
					best = q;
			if (best == nq)
				break;
			struct queue *q = &qs[best];
			uint32_t job = ord[q->pos++].job;
			if (!y.done[job] &&
			    (r = process(&y, job, gangs, n_gangs)) < 0)
				goto out;
			/* Skip heads already decided (gang members). */
			while (q->pos < q->end && y.done[ord[q->pos].job])
				q->pos++;
			if (q->pos < q->end)
				q->key = s->pol->fairshare
				             ? cnl_policy_order(
				                   &y.v, &jobs[ord[q->pos].job])
				             : ord[q->pos].key;
		}
		a = b;
	}
	power(&y);
	r = 0;
out:
	free(y.prep);
	free(y.done);
	free(y.victim);
	free(y.fail);
	free(y.pfail);
	free(y.victim_nodes);
	free(y.vl_off);
	free(y.vl_jobs);
	bounds_clear(&y);
	free(y.lbc);
	free(ord);
	free(qs);
	free(gangs);
	return r;
}

/* ---- admission -------------------------------------------------------- */

int cnl_sched_admit(struct cnl_sched *s, struct cnl_cluster *c,
                    const struct cnl_job *jobs, size_t n_jobs,
                    const struct cnl_job *job, int64_t now_ms,
                    int64_t *ret_start)
{
	struct cyc y;
	struct cnl_req_prep p;
	struct saved pre = {0};
	int64_t rt, t = T_INF;
	uint32_t node;
	int r;

	memset(&y, 0, sizeof(y));
	if ((r = cnl_alloc_prepare(c, &job->req, &p)) < 0)
		return r;
	if (!job->deadline_ms)
		return 0;
	y.s = s;
	y.c = c;
	y.jobs = jobs;
	y.n_jobs = n_jobs;
	y.now = now_ms;
	y.v = (struct cnl_sched_view){.s = s, .c = c, .now_ms = now_ms};
	s->n_resv = 0;
	setup_types(&y);
	rt = runtime_of(&y, job);
	if ((r = setup_runs(&y)) < 0)
		return r;
	if (!could_ever_fit(&y, &p)) {
		*ret_start = -1;
		return -CNL_EDEADLINE;
	}
	/* The best any plan can do: every running job it may pre-empt gone
	 * after the grace period, the rest ending when expected. */
	for (size_t i = 0; i < n_jobs; i++) {
		const struct cnl_job *v = &jobs[i];
		if (v->state != CNL_JOB_RUNNING || !v->preemptible ||
		    v->prio + s->cfg.preempt_class_gap > job->prio)
			continue;
		const struct cnl_alloc *a = cnl_alloc_get(c, v->alloc_id);
		if (a) {
			run_del(s, a->node, v->alloc_id);
			if ((r = save_free(c, &pre, v->alloc_id)) < 0)
				break;
		}
	}
	if (r >= 0 && !(y.lbc = calloc(LBC_MAX, sizeof(*y.lbc))))
		r = -ENOMEM;
	if (r >= 0) {
		y.prep = &p;
		t = earliest(&y, &p, rt, &node);
		bounds_clear(&y);
		free(y.lbc);
		if (pre.n && t != T_INF && t < now_ms + s->cfg.grace_ms)
			t = now_ms + s->cfg.grace_ms;
	}
	restore_all(c, &pre);
	free(pre.a);
	if (r < 0)
		return r;
	*ret_start = t == T_INF ? -1 : t;
	if (t == T_INF || t + deadline_runtime(job) > job->deadline_ms)
		return -CNL_EDEADLINE;
	return 0;
}
