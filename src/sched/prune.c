/*
 * prune.c - cheap before exact: what lets a cycle refuse a request without
 * asking the allocator node by node.
 *
 *  - Per GPU type, the best of each node summary field (tmax): a request
 *    no node of its types could pass is refused without a node scan.
 *  - Per request shape, the failures seen this cycle (fail memory): a
 *    shape that found no node, with no more CPU and memory than one that
 *    failed, fails again, since capacity only shrinks within a cycle
 *    (except by pre-emption, which clears the memory).  Pre-emption keeps
 *    a second memory of the shapes (per class) that found no victims.
 *  - Per type, the largest node: a request that no node could ever run,
 *    even empty, waits with CNL_WHY_NO_MATCHING_NODE.
 *
 * Everything here reads the cluster's node summaries (alloc.h) and the
 * cycle's scratch; nothing here changes the cluster.
 */
#include <string.h>

#include "sched/cycle-internal.h"

/* ---- request shapes and the failure memory ------------------------- */

static uint64_t hash64(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdULL;
}

/* The shape of a request for the caches: everything but CPU and memory. */
uint64_t cnl_cyc_shape_key(const struct cnl_req_prep *p, bool with_project)
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
	/* A node set by its identity: one set, one pointer (the caller's
	 * sets stand still through a cycle). */
	if (r->nodes)
		h = hash64(h, (uint64_t)(uintptr_t)r->nodes);
	return h | 1;
}

uint64_t cnl_cyc_fail_key(const struct cnl_req_prep *p)
{
	/* Block requests depend on their project (tenant rules). */
	return cnl_cyc_shape_key(p, p->req.kind == CNL_REQ_BLOCKS);
}

/* The slot of key `k` in `tab` (open addressing), else the free one it
 * would take; -1 when neither (the table is full). */
static int fail_find(const struct cnl_cyc_fail_tab *tab, uint64_t k)
{
	for (unsigned i = 0, h = (unsigned)(k % FAIL_SLOTS); i < FAIL_SLOTS;
	     i++, h = (h + 1) % FAIL_SLOTS)
		if (tab->e[h].key == k || !tab->e[h].key)
			return (int)h;
	return -1;
}

/* The entry of key `k`, or NULL. */
static const struct cnl_cyc_fail *fail_get(const struct cnl_cyc_fail_tab *tab,
                                           uint64_t k)
{
	int h = fail_find(tab, k);

	return h >= 0 && tab->e[h].key == k ? &tab->e[h] : NULL;
}

/* The entry of key `k`, made if new; NULL when the table is full. */
static struct cnl_cyc_fail *fail_put(struct cnl_cyc_fail_tab *tab, uint64_t k)
{
	int h = fail_find(tab, k);

	if (h < 0)
		return NULL;
	if (!tab->e[h].key)
		tab->used[tab->n_used++] = (uint16_t)h;
	tab->e[h].key = k;
	return &tab->e[h];
}

/* Forget every entry (those made since the last time alone). */
static void fail_forget(struct cnl_cyc_fail_tab *tab)
{
	for (uint32_t i = 0; i < tab->n_used; i++)
		memset(&tab->e[tab->used[i]], 0, sizeof(tab->e[0]));
	tab->n_used = 0;
}

bool cnl_cyc_fail_known_in(const struct cnl_cyc_fail_tab *tab, uint64_t k,
                           const struct cnl_req_prep *p)
{
	const struct cnl_cyc_fail *e = fail_get(tab, k);

	for (int q = 0; e && q < e->n; q++)
		if (p->req.cpu_milli >= e->cpu[q] &&
		    p->req.mem_mib >= e->mem[q])
			return true;
	return false;
}

void cnl_cyc_fail_note_in(struct cnl_cyc_fail_tab *tab, uint64_t k,
                          const struct cnl_req_prep *p)
{
	struct cnl_cyc_fail *e = fail_put(tab, k);

	if (e && e->n < FAIL_PAIRS) {
		e->cpu[e->n] = p->req.cpu_milli;
		e->mem[e->n] = p->req.mem_mib;
		e->n++;
	}
}

bool cnl_cyc_fail_known(const struct cnl_cyc *y, const struct cnl_req_prep *p)
{
	return cnl_cyc_fail_known_in(y->fail, cnl_cyc_fail_key(p), p);
}

void cnl_cyc_fail_note(struct cnl_cyc *y, const struct cnl_req_prep *p)
{
	cnl_cyc_fail_note_in(y->fail, cnl_cyc_fail_key(p), p);
}

uint32_t cnl_cyc_cfail_known(const struct cnl_cyc *y,
                             const struct cnl_req_prep *p, int64_t end)
{
	const struct cnl_cyc_fail *e =
	    y->cfail ? fail_get(y->cfail, cnl_cyc_fail_key(p)) : NULL;

	for (int q = 0; e && q < e->n; q++)
		if (p->req.cpu_milli >= e->cpu[q] &&
		    p->req.mem_mib >= e->mem[q] && end >= e->end[q])
			return e->node[q];
	return NONE;
}

void cnl_cyc_cfail_note(struct cnl_cyc *y, const struct cnl_req_prep *p,
                        int64_t end, uint32_t node)
{
	struct cnl_cyc_fail *e =
	    y->cfail ? fail_put(y->cfail, cnl_cyc_fail_key(p)) : NULL;
	int q, late = -1;

	if (!e)
		return;
	q = e->n;
	/* Full: the new failure replaces one it covers, the one that ends
	 * last (the shortest failed search tells most). */
	if (q == FAIL_PAIRS) {
		for (int w = 0; w < FAIL_PAIRS; w++)
			if (p->req.cpu_milli <= e->cpu[w] &&
			    p->req.mem_mib <= e->mem[w] && end <= e->end[w] &&
			    (late < 0 || e->end[w] > e->end[late]))
				late = w;
		if (late < 0)
			return;
		q = late;
	} else {
		e->n++;
	}
	e->cpu[q] = p->req.cpu_milli;
	e->mem[q] = p->req.mem_mib;
	e->end[q] = end;
	e->node[q] = node;
}

void cnl_cyc_fail_clear(struct cnl_cyc *y)
{
	fail_forget(y->fail);
	if (y->cfail)
		fail_forget(y->cfail);
	fail_forget(y->pfail);
	y->sum_gen++; /* capacity grew: summaries stale */
}

/* ---- per-type maxima -------------------------------------------------- */

static void tmax_refresh(struct cnl_cyc *y, int t)
{
	struct cnl_cyc_type_max *m = &y->tmax[t];
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

void cnl_cyc_tmax_dirty(struct cnl_cyc *y, uint32_t node)
{
	if (y->nver)
		y->nver[node]++;
	if (y->c->nodes[node].n_gpus)
		y->tmax[y->c->nodes[node].gpu_type].dirty = true;
}

/* True when no node of the request's types could pass the allocator's
 * summary test (the same test as node_may_fit, on per-type maxima). */
bool cnl_cyc_tmax_reject(struct cnl_cyc *y, const struct cnl_req_prep *p)
{
	const struct cnl_alloc_req *r = &p->req;

	if (r->kind == CNL_REQ_CPU)
		return false;
	for (int t = 0; t < y->c->cat->n; t++) {
		if (!(p->type_ok >> t & 1))
			continue;
		struct cnl_cyc_type_max *m = &y->tmax[t];
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

/* ---- could it ever run ---------------------------------------------- */

/* Could `p` ever run on node `i` (empty, of its type, big enough)? */
bool cnl_cyc_node_could_host(const struct cnl_cyc *y, uint32_t i,
                             const struct cnl_req_prep *p)
{
	const struct cnl_node *n = &y->c->nodes[i];

	return n->state == CNL_NODE_UP && cnl_req_node_ok(&p->req, i) &&
	       cnl_node_could_host(n, p);
}

static bool fits(const struct cnl_cyc *y, const struct cnl_cyc_maxima *m,
                 const struct cnl_req_prep *p)
{
	const struct cnl_alloc_req *r = &p->req;

	if (r->kind == CNL_REQ_CPU)
		return r->cpu_milli <= m->max_cpu && r->mem_mib <= m->max_mem;
	for (int t = 0; t < y->c->cat->n; t++) {
		if (!(p->type_ok >> t & 1) || !m->type_gpus[t])
			continue;
		if (r->kind == CNL_REQ_MIG && p->prof[t] < 0)
			continue;
		if (r->kind == CNL_REQ_WHOLE && m->type_gpus[t] < r->gpus)
			continue;
		if (m->type_cpu[t] >= r->cpu_milli &&
		    m->type_mem[t] >= r->mem_mib)
			return true;
	}
	return false;
}

bool cnl_cyc_could_ever_fit(const struct cnl_cyc *y,
                            const struct cnl_req_prep *p)
{
	return fits(y, &y->up, p);
}

bool cnl_cyc_could_fit_any_node(const struct cnl_cyc *y,
                                const struct cnl_req_prep *p)
{
	return fits(y, &y->all, p);
}

static void maxima_add(struct cnl_cyc_maxima *m, const struct cnl_node *n)
{
	int t = n->gpu_type;

	if (n->cpu_total > m->max_cpu)
		m->max_cpu = n->cpu_total;
	if (n->mem_total > m->max_mem)
		m->max_mem = n->mem_total;
	if (!n->n_gpus)
		return;
	if (n->cpu_total > m->type_cpu[t])
		m->type_cpu[t] = n->cpu_total;
	if (n->mem_total > m->type_mem[t])
		m->type_mem[t] = n->mem_total;
	if (n->n_gpus > m->type_gpus[t])
		m->type_gpus[t] = n->n_gpus;
}

void cnl_cyc_setup_types(struct cnl_cyc *y)
{
	const struct cnl_cluster *c = y->c;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];

		maxima_add(&y->all, n);
		if (n->state != CNL_NODE_UP)
			continue;
		maxima_add(&y->up, n);
		y->v.capacity_blocks += (int64_t)n->n_gpus * CNL_BLOCKS_PER_GPU;
	}
}
