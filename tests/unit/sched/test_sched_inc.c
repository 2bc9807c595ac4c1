/*
 * test_sched_inc.c - the incremental cycle (cnl_sched_cycle_inc) decides
 * exactly as the from-scratch cycle (cnl_sched_cycle) on randomized
 * sequences of events: jobs submitted, running jobs ended, nodes
 * cordoned and put back, time passing so that work becomes old enough to
 * pre-empt and deadlines draw near.
 *
 * Each step runs the from-scratch cycle, keeps its decisions and the
 * allocations its starts committed, undoes it (starts released, victims
 * restored), then runs the incremental cycle on the same input with its
 * own scheduler, kept across steps: the decisions must be the same, one
 * by one (kind, reason, job, node, times, error, and each start's
 * allocation but for its id).  The incremental cycle's decisions are then
 * applied, starts running and victims requeued, and the next step begins.
 * A third run draws many pending jobs from few classes (class_req).  A
 * fourth, over many seeds, spends the reservations early so that the
 * incremental cycle decides most waiting jobs by their class's summary
 * (cycle.c): it must have done so, and decided as the full path does.
 * A fifth gives the summary more classes than its first table holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/sched.h"

#define H      (3600LL * 1000)
#define MIN    (60LL * 1000)
#define MAXJ   2048
#define STEPS  60
#define SEEDS  12
#define NNODES 24

static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static uint32_t pick(uint32_t n)
{
	return (uint32_t)(rnd() % n);
}

struct world {
	struct cnl_catalog cat;
	struct cnl_cluster *c;
	struct cnl_job jobs[MAXJ];
	size_t n;
	uint64_t next_id, next_gang;
};

static void add_nodes(struct world *w)
{
	static const char *const types[] = {"A100-80GB", "H100-80GB-SXM", "L4",
	                                    "L40S"};
	static const char *const racks[] = {"r1", "r2", "r3"};
	char name[32];

	for (int i = 0; i < NNODES; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		struct cnl_node_spec s = {
		    .name = name,
		    .gpu_type = cnl_catalog_find(&w->cat, types[i % 4]),
		    .n_gpus = i % 5 == 4 ? 0 : (i % 3 == 0 ? 8 : 4),
		    .cpu_milli = 64000,
		    .mem_mib = 512 * 1024,
		    .cluster = "c1",
		    .zone = i < NNODES / 2 ? "z1" : "z2",
		    .rack = racks[i % 3]};
		assert_true(cnl_cluster_add_node(w->c, &s) >= 0);
	}
}

/*
 * Classes: when set, requests come from a few shapes only (same kind,
 * size, types, project, CPU and memory) with a few run times, so that
 * many pending jobs share a class: the incremental cycle's memories per
 * request (the fit memory of earliest starts) are hit over and over,
 * across reservations, starts, pre-emptions and gangs.
 */
static bool classes;

/* When >= 0, the schedulers' max_reservations; the summary's hits over
 * the runs. */
static int max_resv = -1;
static size_t summary_hits;

static void class_req(struct cnl_job *j)
{
	static const struct {
		enum cnl_req_kind kind;
		int n;
		int type;
		uint32_t project;
	} shapes[] = {
	    {CNL_REQ_BLOCKS, 4, CNL_GPU_TYPE_ANY, 1},
	    {CNL_REQ_BLOCKS, 4, CNL_GPU_TYPE_ANY, 2},
	    {CNL_REQ_BLOCKS, 8, 0, 3},
	    {CNL_REQ_WHOLE, 1, CNL_GPU_TYPE_ANY, 1},
	    {CNL_REQ_WHOLE, 4, 1, 2},
	    {CNL_REQ_CPU, 0, CNL_GPU_TYPE_ANY, 4},
	};
	uint32_t k = pick(sizeof(shapes) / sizeof(shapes[0]));

	j->req.kind = shapes[k].kind;
	if (shapes[k].kind == CNL_REQ_BLOCKS)
		j->req.blocks = shapes[k].n;
	else if (shapes[k].kind == CNL_REQ_WHOLE)
		j->req.gpus = shapes[k].n;
	j->req.gpu_type = shapes[k].type;
	j->req.project = shapes[k].project;
	j->req.cpu_milli = 4000 * (1 + (int64_t)(k % 2));
	j->req.mem_mib = 32 * 1024;
	j->runtime_ms = (int64_t)(1 + pick(3)) * 60 * MIN;
}

/* A new pending job (or a gang of two) at the end of the array. */
static void submit(struct world *w, int64_t now)
{
	int members = pick(10) == 0 ? 2 : 1;
	uint64_t gang = members > 1 ? ++w->next_gang : 0;
	bool spread = members > 1 && pick(2);
	struct cnl_job proto;

	if (w->n + (size_t)members > MAXJ)
		return;
	memset(&proto, 0, sizeof(proto));
	proto.state = CNL_JOB_PENDING;
	proto.prio = (uint8_t)pick(4);
	proto.preemptible = proto.prio <= CNL_PRIO_NORMAL && pick(4) != 0;
	switch (pick(6)) {
	case 0:
		proto.req.kind = CNL_REQ_WHOLE;
		proto.req.gpus = 1 + (int)pick(pick(4) == 0 ? 8 : 2);
		break;
	case 1:
		proto.req.kind = CNL_REQ_CPU;
		break;
	default:
		proto.req.kind = CNL_REQ_BLOCKS;
		proto.req.blocks = 1 + (int)pick(CNL_BLOCKS_PER_GPU);
		break;
	}
	proto.req.gpu_type = pick(4) == 0 ? (int)pick(4) : CNL_GPU_TYPE_ANY;
	proto.req.project = 1 + pick(4);
	proto.req.cpu_milli = 500 * (1 + (int64_t)pick(16));
	proto.req.mem_mib = 1024 * (1 + (int64_t)pick(64));
	proto.submit_ms = now - (int64_t)pick(4 * 60) * MIN;
	proto.runtime_ms =
	    pick(5) == 0 ? 0 : (1 + (int64_t)pick(12 * 60)) * MIN;
	if (classes)
		class_req(&proto);
	if (pick(classes ? 2 : 4) == 0)
		proto.deadline_ms = now + proto.runtime_ms +
		                    (int64_t)pick(10 * 60) * MIN - 60 * MIN;
	for (int m = 0; m < members; m++) {
		struct cnl_job *j = &w->jobs[w->n++];
		*j = proto;
		j->id = ++w->next_id;
		j->gang = gang;
		j->gang_size = (uint16_t)(gang ? members : 0);
		j->spread = spread;
	}
}

static void drop(struct world *w, size_t i)
{
	memmove(&w->jobs[i], &w->jobs[i + 1],
	        (w->n - i - 1) * sizeof(w->jobs[0]));
	w->n--;
}

/* Some running jobs end (their allocation released), in array order. */
static void end_some(struct world *w, int k)
{
	for (int e = 0; e < k && w->n; e++) {
		size_t i = pick((uint32_t)w->n);
		for (size_t t = 0; t < w->n; t++, i = (i + 1) % w->n)
			if (w->jobs[i].state == CNL_JOB_RUNNING)
				break;
		if (w->jobs[i].state != CNL_JOB_RUNNING)
			return;
		assert_int_equal(cnl_alloc_free(w->c, w->jobs[i].alloc_id), 0);
		drop(w, i);
	}
}

/* Some pending jobs are cancelled. */
static void cancel_some(struct world *w, int k)
{
	for (int e = 0; e < k && w->n; e++) {
		size_t i = pick((uint32_t)w->n);
		if (w->jobs[i].state == CNL_JOB_PENDING && !w->jobs[i].gang)
			drop(w, i);
	}
}

static bool same_alloc(const struct cnl_alloc *a, const struct cnl_alloc *b)
{
	return a->project == b->project && a->node == b->node &&
	       a->req_kind == b->req_kind && a->kind == b->kind &&
	       a->gpu == b->gpu && a->profile == b->profile &&
	       a->start == b->start && a->blocks == b->blocks &&
	       a->gpu_mask == b->gpu_mask && a->mask[0] == b->mask[0] &&
	       a->mask[1] == b->mask[1] && a->cpu_milli == b->cpu_milli &&
	       a->mem_mib == b->mem_mib;
}

static void check_same(const struct cnl_cluster *c,
                       const struct cnl_decisions *a,
                       const struct cnl_alloc *a_allocs,
                       const struct cnl_decisions *b, uint64_t seed, int step)
{
	if (a->n != b->n)
		fail_msg("seed %llu step %d: %zu decisions from scratch, %zu "
		         "incremental",
		         (unsigned long long)seed, step, a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		const struct cnl_decision *x = &a->d[i], *z = &b->d[i];
		bool same = x->kind == z->kind && x->reason == z->reason &&
		            x->job == z->job && x->node == z->node &&
		            x->for_job == z->for_job && x->at_ms == z->at_ms &&
		            x->kill_ms == z->kill_ms && x->error == z->error;
		if (same && x->kind == CNL_DEC_START)
			same = same_alloc(&a_allocs[i],
			                  cnl_alloc_get(c, z->alloc_id));
		if (!same)
			fail_msg("seed %llu step %d decision %zu: from scratch "
			         "kind %d reason %d job %u node %u at %lld; "
			         "incremental kind %d reason %d job %u node %u "
			         "at %lld",
			         (unsigned long long)seed, step, i, x->kind,
			         x->reason, x->job, x->node,
			         (long long)x->at_ms, z->kind, z->reason,
			         z->job, z->node, (long long)z->at_ms);
	}
}

static void run_seed(uint64_t seed, const char *policy)
{
	struct world *w = calloc(1, sizeof(*w));
	struct cnl_sched_config cfg;
	struct cnl_sched *s_old, *s_inc;
	struct cnl_decisions d_old = {0}, d_inc = {0};
	struct cnl_alloc *saved = calloc(MAXJ, sizeof(*saved));
	struct cnl_alloc *started = NULL;
	int64_t now = 1000 * H;
	size_t n_starts = 0, n_preempts = 0, n_resv = 0;
	char err[256];

	assert_non_null(w);
	assert_non_null(saved);
	rng = seed * 0x9E3779B97F4A7C15ULL + 1;
	cnl_catalog_init(&w->cat);
	assert_int_equal(cnl_cluster_new(&w->cat, &w->c), 0);
	add_nodes(w);
	cnl_sched_config_default(&cfg);
	snprintf(cfg.policy, sizeof(cfg.policy), "%s", policy);
	cfg.idle_power_down_ms = 30 * MIN;
	if (max_resv >= 0)
		cfg.max_reservations = max_resv;
	assert_int_equal(cnl_sched_new(&cfg, &s_old), 0);
	assert_int_equal(cnl_sched_new(&cfg, &s_inc), 0);
	for (int i = 0; i < (classes ? 600 : 150); i++)
		submit(w, now);

	for (int step = 0; step < STEPS; step++) {
		/* The from-scratch cycle, kept and undone. */
		for (size_t i = 0; i < w->n; i++)
			if (w->jobs[i].state == CNL_JOB_RUNNING)
				saved[i] =
				    *cnl_alloc_get(w->c, w->jobs[i].alloc_id);
		assert_int_equal(cnl_sched_cycle(s_old, w->c, w->jobs, w->n,
		                                 now, seed, &d_old),
		                 0);
		started = realloc(started, (d_old.n + 1) * sizeof(*started));
		assert_non_null(started);
		for (size_t i = 0; i < d_old.n; i++)
			if (d_old.d[i].kind == CNL_DEC_START)
				started[i] =
				    *cnl_alloc_get(w->c, d_old.d[i].alloc_id);
		for (size_t i = d_old.n; i-- > 0;)
			if (d_old.d[i].kind == CNL_DEC_START)
				assert_int_equal(
				    cnl_alloc_free(w->c, d_old.d[i].alloc_id),
				    0);
		for (size_t i = d_old.n; i-- > 0;)
			if (d_old.d[i].kind == CNL_DEC_PREEMPT)
				assert_int_equal(
				    cnl_alloc_restore(w->c,
				                      &saved[d_old.d[i].job]),
				    0);

		/* The incremental cycle on the same input. */
		assert_int_equal(cnl_sched_cycle_inc(s_inc, w->c, w->jobs, w->n,
		                                     now, seed, &d_inc),
		                 0);
		check_same(w->c, &d_old, started, &d_inc, seed, step);

		/* Apply: starts run, victims go back to the queue. */
		for (size_t i = 0; i < d_inc.n; i++) {
			const struct cnl_decision *d = &d_inc.d[i];
			struct cnl_job *j;

			/* Other kinds (waits, reservations) change nothing
			 * here, and some name no job. */
			if (d->kind == CNL_DEC_WAIT &&
			    d->reason == CNL_WHY_RESERVED)
				n_resv++;
			if (d->kind != CNL_DEC_START &&
			    d->kind != CNL_DEC_PREEMPT)
				continue;
			j = &w->jobs[d->job];
			if (d->kind == CNL_DEC_START) {
				j->state = CNL_JOB_RUNNING;
				j->alloc_id = d->alloc_id;
				j->start_ms = d->at_ms;
				n_starts++;
			} else if (d->kind == CNL_DEC_PREEMPT) {
				j->state = CNL_JOB_PENDING;
				j->alloc_id = 0;
				n_preempts++;
			}
		}

		/* Events before the next cycle. */
		now += (int64_t)(1 + pick(40)) * MIN;
		end_some(w, (int)pick(6));
		cancel_some(w, (int)pick(2));
		for (int k = (int)pick(14); k > 0; k--)
			submit(w, now);
		if (pick(5) == 0) {
			uint32_t nd = pick(NNODES);
			enum cnl_node_state st =
			    w->c->nodes[nd].state == CNL_NODE_UP
			        ? (pick(2) ? CNL_NODE_CORDONED
			                   : CNL_NODE_DRAINING)
			        : CNL_NODE_UP;
			assert_int_equal(
			    cnl_cluster_set_node_state(w->c, nd, st), 0);
		}
		if (cnl_cluster_check(w->c, err, sizeof(err)) != 0)
			fail_msg("seed %llu step %d: invariants: %s",
			         (unsigned long long)seed, step, err);
	}
	/* The sequences must exercise what the cycle does. */
	assert_true(n_starts > 0);
	if (classes) {
		assert_true(n_resv > 0);
		assert_true(n_preempts > 0);
	}
	print_message("seed %llu %s: %zu starts, %zu pre-emptions, %zu "
	              "reservations\n",
	              (unsigned long long)seed, policy, n_starts, n_preempts,
	              n_resv);
	summary_hits += cnl_sched_summary_hits(s_inc);
	cnl_decisions_done(&d_old);
	cnl_decisions_done(&d_inc);
	cnl_sched_free(s_old);
	cnl_sched_free(s_inc);
	cnl_cluster_free(w->c);
	free(started);
	free(saved);
	free(w);
}

static void test_same_decisions_cnlab(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= SEEDS; seed++)
		run_seed(seed, "cnlab");
}

static void test_same_decisions_other_policies(void **state)
{
	static const char *const pols[] = {"fifo", "fgd", "bestfit"};
	(void)state;
	for (size_t p = 0; p < sizeof(pols) / sizeof(pols[0]); p++)
		for (uint64_t seed = 100; seed < 100 + SEEDS / 3; seed++)
			run_seed(seed, pols[p]);
}

/* Many pending jobs of few classes (see class_req): a class blocked while
 * capacity frees, in every priority, with deadlines, reservations and
 * backfill, gangs and pre-emption. */
static void test_same_decisions_classes(void **state)
{
	(void)state;
	classes = true;
	/* A fit memory that trusted a time after the node's capacity
	 * changed decided differently at seed 219 (few seeds: the ASan
	 * build runs this too). */
	for (uint64_t seed = 216; seed < 223; seed++)
		run_seed(seed, "cnlab");
	run_seed(300, "fifo");
	classes = false;
}

/* The class summary: with few reservations to give, most blocked jobs
 * without a deadline are decided by their class's first; over many seeds
 * (classes and free shapes, every policy's order and placement, gangs,
 * pre-emption, nodes cordoned and back) the decisions must be the
 * from-scratch cycle's, one by one, and the summary must have been used. */
static void test_summary_same_decisions(void **state)
{
	static const char *const pols[] = {"cnlab", "fifo", "fgd"};
	(void)state;
	summary_hits = 0;
	for (uint64_t seed = 500; seed < 530; seed++) {
		classes = seed % 2 == 0;
		max_resv = (int)(seed % 3);
		run_seed(seed, pols[seed % 3]);
	}
	classes = false;
	max_resv = -1;
	print_message("summary: %zu jobs decided by their class's\n",
	              summary_hits);
	assert_true(summary_hits > 0);
}

/* More classes than the summary's first table holds (cycle.c: SUM_SLOTS
 * slots, doubled before half full): K classes of two jobs each, none of
 * which any node could ever run (more CPU than any node has), so that the
 * second job of every class is decided by its class's summary.  The
 * decisions are the from-scratch cycle's, and every second job is a hit:
 * a table that stopped taking classes once full, or lost some when it
 * grew, decides them the full way (fewer hits).  Twice, the second time
 * on the table kept grown. */
static void test_summary_many_classes(void **state)
{
	enum { K = 5000 };
	struct world *w = calloc(1, sizeof(*w));
	struct cnl_job *jobs = calloc(2 * K, sizeof(*jobs));
	struct cnl_sched_config cfg;
	struct cnl_sched *s_old, *s_inc;
	struct cnl_decisions d_old = {0}, d_inc = {0};
	int64_t now = 1000 * H;

	(void)state;
	assert_non_null(w);
	assert_non_null(jobs);
	cnl_catalog_init(&w->cat);
	assert_int_equal(cnl_cluster_new(&w->cat, &w->c), 0);
	add_nodes(w);
	for (size_t i = 0; i < 2 * K; i++) {
		struct cnl_job *j = &jobs[i];
		j->id = i + 1;
		j->state = CNL_JOB_PENDING;
		j->prio = CNL_PRIO_NORMAL;
		j->req.kind = CNL_REQ_CPU;
		j->req.gpu_type = CNL_GPU_TYPE_ANY;
		j->req.project = 1 + (uint32_t)(i % 4);
		j->req.cpu_milli = 64001 + (int64_t)(i % K);
		j->req.mem_mib = 1024;
		j->submit_ms = now - (int64_t)i * 1000;
	}
	cnl_sched_config_default(&cfg);
	assert_int_equal(cnl_sched_new(&cfg, &s_old), 0);
	assert_int_equal(cnl_sched_new(&cfg, &s_inc), 0);
	for (int step = 0; step < 2; step++) {
		assert_int_equal(
		    cnl_sched_cycle(s_old, w->c, jobs, 2 * K, now, 1, &d_old),
		    0);
		assert_int_equal(cnl_sched_cycle_inc(s_inc, w->c, jobs, 2 * K,
		                                     now, 1, &d_inc),
		                 0);
		check_same(w->c, &d_old, NULL, &d_inc, 1, step);
		assert_int_equal(d_inc.n, 2 * K);
		for (size_t i = 0; i < d_inc.n; i++)
			assert_int_equal(d_inc.d[i].reason,
			                 CNL_WHY_NO_MATCHING_NODE);
		assert_int_equal(cnl_sched_summary_hits(s_inc),
		                 (size_t)K * (size_t)(step + 1));
		now += MIN;
	}
	cnl_decisions_done(&d_old);
	cnl_decisions_done(&d_inc);
	cnl_sched_free(s_old);
	cnl_sched_free(s_inc);
	cnl_cluster_free(w->c);
	free(jobs);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_decisions_cnlab),
	    cmocka_unit_test(test_same_decisions_other_policies),
	    cmocka_unit_test(test_same_decisions_classes),
	    cmocka_unit_test(test_summary_same_decisions),
	    cmocka_unit_test(test_summary_many_classes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
