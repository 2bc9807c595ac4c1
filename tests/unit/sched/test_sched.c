/*
 * test_sched.c - scenario tests for the scheduler, each asserting the exact
 * decision: who starts where, who waits (reason, estimated start, which
 * reservation), who is pre-empted (and when killed), who yields under fair
 * share, how gangs, locality, backfill and power-down behave, and that the
 * same inputs give the same decisions.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/sched.h"

#define H   (3600LL * 1000)
#define MIN (60LL * 1000)
#define T0  (1000 * H) /* "now" of every test */

enum { TA = 1, TB = 2, TC = 3 };

static struct cnl_catalog cat;
static struct cnl_cluster *cl;
static struct cnl_sched *sch;
static struct cnl_sched_config cfg;
static struct cnl_job jobs[256];
static size_t n_jobs;
static struct cnl_decisions dec;

static int setup(void **state)
{
	(void)state;
	cnl_catalog_init(&cat);
	assert_int_equal(cnl_cluster_new(&cat, &cl), 0);
	cnl_sched_config_default(&cfg);
	sch = NULL;
	n_jobs = 0;
	memset(jobs, 0, sizeof(jobs));
	memset(&dec, 0, sizeof(dec));
	return 0;
}

static int teardown(void **state)
{
	char err[256] = "";
	(void)state;
	if (cnl_cluster_check(cl, err, sizeof(err)) != 0)
		fail_msg("invariants: %s", err);
	cnl_decisions_done(&dec);
	cnl_sched_free(sch);
	cnl_cluster_free(cl);
	return 0;
}

static struct cnl_sched *sched(void)
{
	if (!sch)
		assert_int_equal(cnl_sched_new(&cfg, &sch), 0);
	return sch;
}

static int node(const char *name, const char *type, int gpus, const char *rack)
{
	struct cnl_node_spec s = {.name = name,
	                          .gpu_type = cnl_catalog_find(&cat, type),
	                          .n_gpus = gpus,
	                          .cpu_milli = 64000,
	                          .mem_mib = 256 * 1024,
	                          .cluster = "c1",
	                          .zone = "z1",
	                          .rack = rack ? rack : "r1"};
	int r = cnl_cluster_add_node(cl, &s);
	assert_true(r >= 0);
	return r;
}

/* A pending job; returns its index. */
static uint32_t job(uint32_t team, int prio, enum cnl_req_kind kind, int size,
                    int64_t submit, int64_t runtime)
{
	struct cnl_job *j = &jobs[n_jobs];
	assert_true(n_jobs < sizeof(jobs) / sizeof(jobs[0]));
	memset(j, 0, sizeof(*j));
	j->id = 100 + n_jobs;
	j->state = CNL_JOB_PENDING;
	j->prio = (uint8_t)prio;
	j->req.kind = kind;
	j->req.blocks = kind == CNL_REQ_BLOCKS ? size : 0;
	j->req.gpus = kind == CNL_REQ_WHOLE ? size : 0;
	j->req.gpu_type = CNL_GPU_TYPE_ANY;
	j->req.project = team;
	j->req.cpu_milli = 1000;
	j->req.mem_mib = 1024;
	j->submit_ms = submit;
	j->runtime_ms = runtime;
	return (uint32_t)n_jobs++;
}

/* A job already running since `start`, placed by the allocator now. */
static uint32_t running(uint32_t team, int prio, bool preemptible,
                        enum cnl_req_kind kind, int size, int64_t start,
                        int64_t runtime)
{
	uint32_t i = job(team, prio, kind, size, start, runtime);
	struct cnl_job *j = &jobs[i];
	assert_int_equal(cnl_alloc_place(cl, &j->req, &j->alloc_id), 0);
	j->state = CNL_JOB_RUNNING;
	j->preemptible = preemptible;
	j->start_ms = start;
	return i;
}

static void cycle_at(int64_t now)
{
	assert_int_equal(
	    cnl_sched_cycle(sched(), cl, jobs, n_jobs, now, 42, &dec), 0);
}

static const struct cnl_decision *of(uint32_t j, enum cnl_dec_kind kind)
{
	const struct cnl_decision *found = NULL;
	for (size_t i = 0; i < dec.n; i++)
		if (dec.d[i].job == j && dec.d[i].kind != CNL_DEC_POWER_DOWN) {
			assert_null(found); /* one decision per job */
			found = &dec.d[i];
		}
	if (!found)
		fail_msg("no decision for job %u", j);
	if (found->kind != kind)
		fail_msg("job %u: decision %d (%s), want %d", j, found->kind,
		         cnl_reason_text(found->reason), kind);
	return found;
}

static void expect_start(uint32_t j, uint32_t on_node, enum cnl_reason why)
{
	const struct cnl_decision *d = of(j, CNL_DEC_START);
	assert_int_equal(d->node, on_node);
	if (d->reason != why)
		fail_msg("job %u started for \"%s\", want \"%s\"", j,
		         cnl_reason_text(d->reason), cnl_reason_text(why));
	assert_non_null(cnl_alloc_get(cl, d->alloc_id));
}

static const struct cnl_decision *expect_wait(uint32_t j, enum cnl_reason why)
{
	const struct cnl_decision *d = of(j, CNL_DEC_WAIT);
	if (d->reason != why)
		fail_msg("job %u waits for \"%s\", want \"%s\"", j,
		         cnl_reason_text(d->reason), cnl_reason_text(why));
	return d;
}

/* Apply START decisions, as cnlabd or the simulator would. */
static void apply(int64_t now)
{
	for (size_t i = 0; i < dec.n; i++) {
		const struct cnl_decision *d = &dec.d[i];
		if (d->kind == CNL_DEC_START) {
			jobs[d->job].state = CNL_JOB_RUNNING;
			jobs[d->job].alloc_id = d->alloc_id;
			jobs[d->job].start_ms = d->at_ms > now ? d->at_ms : now;
		}
	}
}

/* ---- basics ----------------------------------------------------------- */

static void test_start_and_explain(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	uint32_t a = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 60, T0, H);
	uint32_t b = job(TB, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 60, T0 + 1, H);
	cycle_at(T0);
	expect_start(a, 0, CNL_WHY_STARTED);
	/* b is blocked: it gets a reservation when a ends, in an hour. */
	const struct cnl_decision *d = expect_wait(b, CNL_WHY_RESERVED);
	assert_int_equal(d->at_ms, T0 + H);
	assert_int_equal(d->node, 0);
}

static void test_priority_classes_are_strict(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	uint32_t lo = job(TA, CNL_PRIO_LOW, CNL_REQ_WHOLE, 1, T0 - 10 * H, H);
	uint32_t hi = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, H);
	cycle_at(T0);
	expect_start(hi, 0, CNL_WHY_STARTED);
	assert_int_equal(expect_wait(lo, CNL_WHY_RESERVED)->at_ms, T0 + H);
}

static void test_invalid_and_unplaceable(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	uint32_t bad = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 0, T0, H);
	uint32_t h100 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 5, T0, H);
	jobs[h100].req.gpu_type = cnl_catalog_find(&cat, "H100-80GB-SXM");
	uint32_t huge = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 2, T0, H);
	cycle_at(T0);
	assert_int_equal(expect_wait(bad, CNL_WHY_INVALID)->error,
	                 -CNL_EBLOCKS);
	assert_int_equal(expect_wait(h100, CNL_WHY_NO_MATCHING_NODE)->at_ms,
	                 -1);
	expect_wait(huge, CNL_WHY_NO_MATCHING_NODE);
	assert_int_equal(cl->n_allocs, 0);
}

/* Nodes that could run a job but take no work (cordoned, draining, lost)
 * are not "no node could ever run it": the job waits for them. */
static void test_wait_for_cordoned_nodes(void **state)
{
	(void)state;
	uint32_t n0 = (uint32_t)node("n0", "H100-80GB-SXM", 2, NULL);
	uint32_t a = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 25, T0, H);
	uint32_t l4 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 5, T0, H);
	jobs[l4].req.gpu_type = cnl_catalog_find(&cat, "L4");
	assert_int_equal(cnl_cluster_set_node_state(cl, n0, CNL_NODE_CORDONED),
	                 0);
	cycle_at(T0);
	expect_wait(a, CNL_WHY_NO_NODE_TAKING_WORK);
	expect_wait(l4, CNL_WHY_NO_MATCHING_NODE);
	assert_int_equal(cl->n_allocs, 0);
	assert_non_null(
	    strstr(cnl_reason_text(CNL_WHY_NO_NODE_TAKING_WORK), "cordoned"));
}

static void test_running_job_without_allocation(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	uint32_t r = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	jobs[r].state = CNL_JOB_RUNNING;
	jobs[r].alloc_id = 777;
	assert_int_equal(
	    cnl_sched_cycle(sched(), cl, jobs, n_jobs, T0, 1, &dec), -EINVAL);
}

/* ---- fair share ------------------------------------------------------- */

static void test_fairshare_heavy_yesterday_yields(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	/* Team A used the GPU all day yesterday; B did not. */
	assert_int_equal(cnl_fs_charge(cnl_sched_fairshare(sched()), TA, 100,
	                               T0 - 30 * H, T0 - 6 * H),
	                 0);
	uint32_t a = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0 - H, H);
	uint32_t b = job(TB, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	cycle_at(T0);
	/* B starts although A submitted an hour earlier. */
	expect_start(b, 0, CNL_WHY_STARTED);
	expect_wait(a, CNL_WHY_RESERVED);
}

static void test_fairshare_idle_cluster_fully_usable(void **state)
{
	(void)state;
	node("n0", "L4", 4, NULL);
	cnl_fs_charge(cnl_sched_fairshare(sched()), TA, 400, T0 - 48 * H,
	              T0 - H);
	uint32_t a[4];
	for (int i = 0; i < 4; i++)
		a[i] = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	cycle_at(T0);
	for (int i = 0; i < 4; i++)
		expect_start(a[i], 0, CNL_WHY_STARTED);
}

static void test_fairshare_burst_cannot_jump(void **state)
{
	uint32_t a[4], b[2];
	(void)state;
	node("n0", "L4", 4, NULL);
	/* A's burst is older, but B interleaves as soon as A holds more. */
	for (int i = 0; i < 4; i++)
		a[i] =
		    job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0 - 10 + i, H);
	for (int i = 0; i < 2; i++)
		b[i] = job(TB, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	cfg.max_reservations = 0;
	cycle_at(T0);
	expect_start(a[0], 0, CNL_WHY_STARTED);
	expect_start(a[1], 0, CNL_WHY_STARTED);
	expect_start(b[0], 0, CNL_WHY_STARTED);
	expect_start(b[1], 0, CNL_WHY_STARTED);
	expect_wait(a[2], CNL_WHY_NO_CAPACITY);
	expect_wait(a[3], CNL_WHY_NO_CAPACITY);
}

static void test_fifo_policy_ignores_fairshare(void **state)
{
	uint32_t a[4], b[2];
	(void)state;
	node("n0", "L4", 4, NULL);
	memcpy(cfg.policy, "fifo", 5);
	cfg.max_reservations = 0;
	for (int i = 0; i < 4; i++)
		a[i] =
		    job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0 - 10 + i, H);
	for (int i = 0; i < 2; i++)
		b[i] = job(TB, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	cycle_at(T0);
	/* Per team queues still alternate by key, but fifo's key is the
	 * submit time: A's older jobs all win. */
	for (int i = 0; i < 4; i++)
		expect_start(a[i], 0, CNL_WHY_STARTED);
	expect_wait(b[0], CNL_WHY_NO_CAPACITY);
	expect_wait(b[1], CNL_WHY_NO_CAPACITY);
}

/* ---- deadlines -------------------------------------------------------- */

static void test_deadline_reserves_forward(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	running(TA, CNL_PRIO_NORMAL, false, CNL_REQ_WHOLE, 1, T0 - H, 2 * H);
	uint32_t d = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, H);
	jobs[d].deadline_ms = T0 + 3 * H;
	cycle_at(T0);
	/* The running job ends in an hour; the deadline is met by waiting:
	 * no pre-emption, a reservation at T0 + 1h. */
	const struct cnl_decision *w = expect_wait(d, CNL_WHY_RESERVED);
	assert_int_equal(w->at_ms, T0 + H);
	assert_int_equal(w->node, 0);
	int64_t start = 0;
	assert_int_equal(
	    cnl_sched_admit(sch, cl, jobs, n_jobs, &jobs[d], T0, &start), 0);
}

static void test_deadline_preempts_when_waiting_misses(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	uint32_t v =
	    running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1, T0 - H, 10 * H);
	uint32_t d = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, H);
	jobs[d].deadline_ms = T0 + 2 * H;
	cycle_at(T0);
	const struct cnl_decision *p = of(v, CNL_DEC_PREEMPT);
	assert_int_equal(p->for_job, d);
	assert_int_equal(p->at_ms, T0);
	assert_int_equal(p->kill_ms, T0 + cfg.grace_ms);
	expect_start(d, 0, CNL_WHY_AFTER_PREEMPTION);
	assert_int_equal(of(d, CNL_DEC_START)->at_ms, T0 + cfg.grace_ms);
	/* The victim's allocation is released in the snapshot. */
	assert_null(cnl_alloc_get(cl, jobs[v].alloc_id));
}

static void test_deadline_infeasible_reported(void **state)
{
	int64_t start = 0;
	(void)state;
	node("n0", "L4", 1, NULL);
	/* Production inference: critical and not preemptible. */
	running(TA, CNL_PRIO_CRITICAL, false, CNL_REQ_WHOLE, 1, T0 - H, 10 * H);
	uint32_t d = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, H);
	jobs[d].deadline_ms = T0 + 2 * H;
	assert_int_equal(
	    cnl_sched_admit(sched(), cl, jobs, n_jobs, &jobs[d], T0, &start),
	    -CNL_EDEADLINE);
	assert_int_equal(start, T0 + 9 * H);
	/* Later deadline: feasible. */
	struct cnl_job later = jobs[d];
	later.deadline_ms = T0 + 11 * H;
	assert_int_equal(
	    cnl_sched_admit(sch, cl, jobs, n_jobs, &later, T0, &start), 0);
	/* Already past: runtime alone misses it. */
	later.deadline_ms = T0 + 30 * MIN;
	assert_int_equal(
	    cnl_sched_admit(sch, cl, jobs, n_jobs, &later, T0, &start),
	    -CNL_EDEADLINE);
	cycle_at(T0);
	const struct cnl_decision *w =
	    expect_wait(d, CNL_WHY_DEADLINE_INFEASIBLE);
	assert_int_equal(w->at_ms, T0 + 9 * H);
}

/* A deadline without a run time is a start-by time, in the cycle and at
 * admission alike: the job is not assumed to run the default 4 h. */
static void test_deadline_without_runtime_is_start_by(void **state)
{
	int64_t start = 0;
	(void)state;
	node("n0", "L4", 1, NULL);
	running(TA, CNL_PRIO_NORMAL, false, CNL_REQ_WHOLE, 1, T0 - H, 2 * H);
	uint32_t d = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, 0);
	/* It can start at T0 + 1h; the default run time (4 h) would end
	 * long after the deadline. */
	jobs[d].deadline_ms = T0 + 2 * H;
	assert_int_equal(
	    cnl_sched_admit(sched(), cl, jobs, n_jobs, &jobs[d], T0, &start),
	    0);
	cycle_at(T0);
	assert_int_equal(expect_wait(d, CNL_WHY_RESERVED)->at_ms, T0 + H);
	/* With a run time of 2 h the same deadline cannot be met. */
	jobs[d].runtime_ms = 2 * H;
	assert_int_equal(
	    cnl_sched_admit(sch, cl, jobs, n_jobs, &jobs[d], T0, &start),
	    -CNL_EDEADLINE);
	cycle_at(T0);
	expect_wait(d, CNL_WHY_DEADLINE_INFEASIBLE);
	/* Nor can a start-by time before the node frees. */
	jobs[d].runtime_ms = 0;
	jobs[d].deadline_ms = T0 + 30 * MIN;
	assert_int_equal(
	    cnl_sched_admit(sch, cl, jobs, n_jobs, &jobs[d], T0, &start),
	    -CNL_EDEADLINE);
	assert_int_equal(start, T0 + H);
}

static void test_admit_counts_preemptible_work(void **state)
{
	int64_t start = 0;
	(void)state;
	node("n0", "L4", 1, NULL);
	running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1, T0 - H, 10 * H);
	struct cnl_job d = {.state = CNL_JOB_PENDING,
	                    .prio = CNL_PRIO_HIGH,
	                    .req = {.kind = CNL_REQ_WHOLE,
	                            .gpus = 1,
	                            .gpu_type = CNL_GPU_TYPE_ANY,
	                            .project = TB},
	                    .submit_ms = T0,
	                    .runtime_ms = H,
	                    .deadline_ms = T0 + 2 * H};
	/* Waiting would take 9 h, but the low job can be pre-empted. */
	assert_int_equal(
	    cnl_sched_admit(sched(), cl, jobs, n_jobs, &d, T0, &start), 0);
	assert_int_equal(start, T0 + cfg.grace_ms);
	/* Nothing changed. */
	assert_int_equal(cl->n_allocs, 1);
	assert_non_null(cnl_alloc_get(cl, jobs[0].alloc_id));
}

/* ---- pre-emption ------------------------------------------------------ */

static void test_preemption_picks_cheapest_victims(void **state)
{
	(void)state;
	node("n0", "L4", 4, NULL);
	/* Four running jobs, one per GPU. */
	uint32_t lost5h = running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1,
	                          T0 - 5 * H, 20 * H);
	uint32_t lost1h = running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1,
	                          T0 - 9 * H, 20 * H);
	jobs[lost1h].checkpoint_ms = T0 - H;
	uint32_t normal = running(TA, CNL_PRIO_NORMAL, true, CNL_REQ_WHOLE, 1,
	                          T0 - 2 * H, 20 * H);
	uint32_t fixed = running(TA, CNL_PRIO_LOW, false, CNL_REQ_WHOLE, 1,
	                         T0 - 2 * H, 20 * H);
	uint32_t hi = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 2, T0, H);
	cycle_at(T0);
	/* Two GPUs: the fewest victims are two; lowest class first, then
	 * least work lost: lost1h (1 h since checkpoint) and lost5h, not
	 * the normal-class one and never the non-preemptible one. */
	assert_int_equal(of(lost1h, CNL_DEC_PREEMPT)->for_job, hi);
	assert_int_equal(of(lost5h, CNL_DEC_PREEMPT)->for_job, hi);
	expect_start(hi, 0, CNL_WHY_AFTER_PREEMPTION);
	for (size_t i = 0; i < dec.n; i++)
		assert_true(dec.d[i].job != normal && dec.d[i].job != fixed);
}

static void test_preemption_fewest_then_least_lost(void **state)
{
	(void)state;
	node("n0", "L4", 2, NULL);
	uint32_t a = running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1,
	                     T0 - 3 * H, 20 * H);
	uint32_t b = running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1,
	                     T0 - 2 * H, 20 * H);
	uint32_t hi = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, H);
	cycle_at(T0);
	/* One victim is enough: the one with less work lost (b, 2 h). */
	assert_int_equal(of(b, CNL_DEC_PREEMPT)->for_job, hi);
	for (size_t i = 0; i < dec.n; i++)
		assert_int_not_equal(dec.d[i].job, a);
}

static void test_preemption_honours_min_runtime_and_class_gap(void **state)
{
	(void)state;
	node("n0", "L4", 1, NULL);
	/* Started 2 minutes ago: protected by min_run_ms (10 min). */
	uint32_t young = running(TA, CNL_PRIO_LOW, true, CNL_REQ_WHOLE, 1,
	                         T0 - 2 * MIN, 20 * H);
	uint32_t hi = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 1, T0, H);
	/* Same class never pre-empts. */
	uint32_t lo2 = job(TC, CNL_PRIO_LOW, CNL_REQ_WHOLE, 1, T0, H);
	cycle_at(T0);
	expect_wait(hi, CNL_WHY_RESERVED);
	expect_wait(lo2, CNL_WHY_RESERVED);
	for (size_t i = 0; i < dec.n; i++)
		assert_int_not_equal(dec.d[i].kind, CNL_DEC_PREEMPT);
	/* Ten minutes later it may go. */
	cycle_at(T0 + 10 * MIN);
	assert_int_equal(of(young, CNL_DEC_PREEMPT)->for_job, hi);
}

/* ---- backfill --------------------------------------------------------- */

static void test_backfill_only_where_no_reservation_is_delayed(void **state)
{
	(void)state;
	node("n0", "L4", 3, NULL);
	running(TA, CNL_PRIO_NORMAL, false, CNL_REQ_WHOLE, 1, T0 - H, 3 * H);
	cfg.max_reservations = 1;
	uint32_t big = job(TB, CNL_PRIO_HIGH, CNL_REQ_WHOLE, 3, T0 - H, 4 * H);
	uint32_t shortj = job(TC, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	uint32_t longj = job(TC, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, 5 * H);
	cycle_at(T0);
	/* The 3-GPU job waits for the running one (2 h left)... */
	assert_int_equal(expect_wait(big, CNL_WHY_RESERVED)->at_ms, T0 + 2 * H);
	/* ...a 1 h job fits before that; a 5 h job would delay it. */
	expect_start(shortj, 0, CNL_WHY_BACKFILLED);
	expect_wait(longj, CNL_WHY_BEHIND_RESERVATION);
}

/* ---- placement -------------------------------------------------------- */

static void test_packing_and_power_down(void **state)
{
	(void)state;
	node("n0", "L4", 4, NULL);
	node("n1", "L4", 4, NULL);
	uint32_t a = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 30, T0, H);
	uint32_t b = job(TB, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 2, T0, H);
	cycle_at(T0);
	expect_start(a, 0, CNL_WHY_STARTED);
	expect_start(b, 0, CNL_WHY_STARTED);
	apply(T0);
	/* n1 is idle; after 30 minutes it is reported. */
	cycle_at(T0 + 10 * MIN);
	for (size_t i = 0; i < dec.n; i++)
		assert_int_not_equal(dec.d[i].kind, CNL_DEC_POWER_DOWN);
	cycle_at(T0 + 31 * MIN);
	size_t downs = 0;
	for (size_t i = 0; i < dec.n; i++)
		if (dec.d[i].kind == CNL_DEC_POWER_DOWN) {
			downs++;
			assert_int_equal(dec.d[i].node, 1);
			assert_int_equal(dec.d[i].at_ms, T0);
		}
	assert_int_equal(downs, 1);
}

static void test_data_locality(void **state)
{
	(void)state;
	node("n0", "L4", 2, NULL);
	struct cnl_node_spec s = {.name = "n1",
	                          .gpu_type = cnl_catalog_find(&cat, "L4"),
	                          .n_gpus = 2,
	                          .cpu_milli = 64000,
	                          .mem_mib = 256 * 1024,
	                          .datasets = {"imagenet", NULL}};
	assert_int_equal(cnl_cluster_add_node(cl, &s), 1);
	uint32_t plain = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	uint32_t near = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	strcpy(jobs[near].dataset, "imagenet"); /* cnl-allow-banned */
	cycle_at(T0);
	expect_start(plain, 0, CNL_WHY_STARTED);
	expect_start(near, 1, CNL_WHY_STARTED);
}

/* Preferred nodes come first wherever the job fits there, over packing;
 * once they are full, the job runs elsewhere, not held back. */
static void test_preferred_nodes(void **state)
{
	(void)state;
	node("n0", "L4", 2, NULL);
	node("n1", "L4", 2, NULL);
	node("n2", "L4", 2, NULL);
	uint64_t bits = UINT64_C(1) << 2;
	struct cnl_node_set only_n2 = {&bits, 3};
	uint32_t plain = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	uint32_t p1 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0 + 1, H);
	uint32_t p2 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0 + 2, H);
	uint32_t p3 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0 + 3, H);
	jobs[p1].prefer = jobs[p2].prefer = jobs[p3].prefer = &only_n2;
	cycle_at(T0 + 10);
	expect_start(plain, 0, CNL_WHY_STARTED);
	expect_start(p1, 2, CNL_WHY_STARTED);
	expect_start(p2, 2, CNL_WHY_STARTED);
	expect_start(p3, 0, CNL_WHY_STARTED); /* n2 full: packing's pick */
}

static void test_gpu_type_constraint(void **state)
{
	(void)state;
	node("l4", "L4", 2, NULL);
	node("h", "H100-80GB-SXM", 2, NULL);
	uint32_t a = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 25, T0, H);
	jobs[a].req.gpu_type = cnl_catalog_find(&cat, "H100-80GB-SXM");
	cycle_at(T0);
	expect_start(a, 1, CNL_WHY_STARTED);
	const struct cnl_alloc *al =
	    cnl_alloc_get(cl, of(a, CNL_DEC_START)->alloc_id);
	assert_int_equal(al->kind, CNL_PLACE_MIG); /* 2g.20gb, by rule R2 */
}

/* CPU strands GPUs: a CPU-heavy job goes where its CPU leaves the node's
 * GPUs fed, not to the node packing prefers (the least CPU left over),
 * whose eight GPUs the remaining cores could no longer serve. */
static void test_cpu_does_not_strand_gpus(void **state)
{
	(void)state;
	struct cnl_node_spec poor = {.name = "poor",
	                             .gpu_type = cnl_catalog_find(&cat, "L4"),
	                             .n_gpus = 8,
	                             .cpu_milli = 16000,
	                             .mem_mib = 256 * 1024};
	struct cnl_node_spec rich = poor;
	rich.name = "rich";
	rich.n_gpus = 2;
	rich.cpu_milli = 64000;
	assert_int_equal(cnl_cluster_add_node(cl, &poor), 0);
	assert_int_equal(cnl_cluster_add_node(cl, &rich), 1);
	uint32_t a = job(TA, CNL_PRIO_NORMAL, CNL_REQ_CPU, 0, T0, H);
	jobs[a].req.cpu_milli = 8000;
	cycle_at(T0);
	expect_start(a, 1, CNL_WHY_STARTED);
}

static void test_gang_placed_together_by_network_distance(void **state)
{
	(void)state;
	node("n0", "L4", 8, "r1");
	node("n1", "L4", 8, "r2");
	node("n2", "L4", 8, "r1");
	uint32_t g1 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 8, T0, H);
	uint32_t g2 = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 8, T0, H);
	jobs[g1].gang = jobs[g2].gang = 7;
	jobs[g1].gang_size = jobs[g2].gang_size = 2;
	cycle_at(T0);
	/* Same rack (n0, n2) beats the next node in order (n1). */
	expect_start(g1, 0, CNL_WHY_STARTED);
	expect_start(g2, 2, CNL_WHY_STARTED);
}

static void test_gang_all_or_nothing(void **state)
{
	(void)state;
	node("n0", "L4", 8, NULL);
	node("n1", "L4", 8, NULL);
	uint32_t m[3];
	for (int i = 0; i < 3; i++) {
		m[i] = job(TA, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 8, T0, H);
		jobs[m[i]].gang = 9;
		jobs[m[i]].gang_size = 3;
	}
	/* Incomplete gang: a fourth member is missing. */
	uint32_t x = job(TB, CNL_PRIO_NORMAL, CNL_REQ_WHOLE, 1, T0, H);
	jobs[x].gang = 11;
	jobs[x].gang_size = 2;
	cycle_at(T0);
	/* Three 8-GPU members on two 8-GPU nodes: none starts, and the two
	 * that fitted were rolled back. */
	for (int i = 0; i < 3; i++)
		expect_wait(m[i], CNL_WHY_GANG_INCOMPLETE);
	expect_wait(x, CNL_WHY_GANG_INCOMPLETE);
	assert_int_equal(cl->n_allocs, 0);
}

/* Four small members that would all pack onto one node: spread, each gets
 * a node of its own; without spread (the control) they share. */
static void test_gang_spread_distinct_nodes(void **state)
{
	uint32_t m[3];
	bool seen[4] = {false};

	(void)state;
	for (int i = 0; i < 4; i++) {
		char name[8];

		snprintf(name, sizeof(name), "n%d", i);
		node(name, "L4", 4, i < 2 ? "r1" : "r2");
	}
	for (int i = 0; i < 3; i++) {
		m[i] = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 10, T0, H);
		jobs[m[i]].gang = 5;
		jobs[m[i]].gang_size = 3;
		jobs[m[i]].spread = true;
	}
	uint32_t c[2];
	for (int i = 0; i < 2; i++) {
		c[i] = job(TB, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 10, T0, H);
		jobs[c[i]].gang = 6;
		jobs[c[i]].gang_size = 2;
	}
	cycle_at(T0);
	for (int i = 0; i < 3; i++) {
		uint32_t on = of(m[i], CNL_DEC_START)->node;

		assert_false(seen[on]); /* never two members on one node */
		seen[on] = true;
	}
	assert_int_equal(of(c[0], CNL_DEC_START)->node,
	                 of(c[1], CNL_DEC_START)->node);
}

/* A spread gang larger than the number of nodes that can take it waits,
 * whole, and holds nothing; a node more and it starts. */
static void test_gang_spread_waits_for_nodes(void **state)
{
	uint32_t m[3];

	(void)state;
	node("n0", "L4", 8, NULL);
	node("n1", "L4", 8, NULL);
	node("cpu", "L4", 0, NULL); /* no GPU: cannot take a member */
	for (int i = 0; i < 3; i++) {
		m[i] = job(TA, CNL_PRIO_NORMAL, CNL_REQ_BLOCKS, 5, T0, H);
		jobs[m[i]].gang = 8;
		jobs[m[i]].gang_size = 3;
		jobs[m[i]].spread = true;
	}
	cycle_at(T0);
	for (int i = 0; i < 3; i++)
		expect_wait(m[i], CNL_WHY_GANG_INCOMPLETE);
	assert_int_equal(cl->n_allocs, 0);
	node("n2", "L4", 1, NULL);
	cycle_at(T0 + MIN);
	bool seen[4] = {false};
	for (int i = 0; i < 3; i++) {
		uint32_t on = of(m[i], CNL_DEC_START)->node;

		assert_int_not_equal(on, 2);
		assert_false(seen[on]);
		seen[on] = true;
	}
}

/* ---- determinism and config ------------------------------------------- */

static void build_mixed(void)
{
	node("a", "H100-80GB-SXM", 4, "r1");
	node("b", "A100-80GB", 4, "r2");
	node("c", "L40S", 2, "r1");
	for (int i = 0; i < 40; i++) {
		enum cnl_req_kind k =
		    i % 3 == 0 ? CNL_REQ_WHOLE : CNL_REQ_BLOCKS;
		uint32_t j =
		    job((uint32_t)(1 + i % 5), i % 4, k,
		        k == CNL_REQ_WHOLE ? 1 + i % 2 : 1 + (i * 7) % 60,
		        T0 - i * MIN, (1 + i % 4) * H);
		if (i % 7 == 0)
			jobs[j].deadline_ms = T0 + (4 + i % 5) * H;
	}
}

static void test_determinism(void **state)
{
	char err[256] = "";
	(void)state;
	build_mixed();
	cycle_at(T0);
	if (cnl_cluster_check(cl, err, sizeof(err)) != 0)
		fail_msg("after first cycle: %s", err);
	struct cnl_decisions first = dec;
	memset(&dec, 0, sizeof(dec));
	/* A second, identical world. */
	struct cnl_cluster *c2;
	struct cnl_sched *s2;
	assert_int_equal(cnl_cluster_new(&cat, &c2), 0);
	struct cnl_cluster *keep = cl;
	cl = c2;
	build_mixed();
	cl = keep;
	assert_int_equal(cnl_sched_new(&cfg, &s2), 0);
	int rc = cnl_sched_cycle(s2, c2, jobs, n_jobs / 2, T0, 42, &dec);
	if (rc != 0)
		fail_msg("second cycle: %s", cnl_strerror(rc));
	if (cnl_cluster_check(cl, err, sizeof(err)) != 0)
		fail_msg("after second cycle: %s", err);
	assert_int_equal(dec.n, first.n);
	for (size_t i = 0; i < dec.n; i++) {
		const struct cnl_decision *x = &dec.d[i], *y = &first.d[i];
		if (x->kind != y->kind || x->reason != y->reason ||
		    x->job != y->job || x->node != y->node ||
		    x->for_job != y->for_job || x->at_ms != y->at_ms ||
		    x->kill_ms != y->kill_ms || x->error != y->error ||
		    x->alloc_id != y->alloc_id)
			fail_msg("decision %zu differs", i);
	}
	assert_true(first.n >= 40);
	cnl_decisions_done(&first);
	cnl_sched_free(s2);
	cnl_cluster_free(c2);
}

static void test_config_and_registry(void **state)
{
	struct cnl_sched *s;
	(void)state;
	assert_non_null(cnl_policy_find("cnlab"));
	assert_non_null(cnl_policy_find("fifo"));
	assert_null(cnl_policy_find("nope"));
	size_t n = 0;
	for (const struct cnl_policy_ops *const *p = cnl_policy_list(); *p; p++)
		n++;
	assert_true(n >= 2);
	memcpy(cfg.policy, "nope", 5);
	assert_int_equal(cnl_sched_new(&cfg, &s), -CNL_ECONFIG);
	cnl_sched_config_default(&cfg);
	cfg.w_fairshare = -1;
	assert_int_equal(cnl_sched_new(&cfg, &s), -CNL_ECONFIG);
	cnl_sched_config_default(&cfg);
	cfg.preempt_class_gap = 0;
	assert_int_equal(cnl_sched_new(&cfg, &s), -CNL_ECONFIG);
	cnl_sched_config_default(&cfg);
	cfg.default_runtime_ms = 0;
	assert_int_equal(cnl_sched_new(&cfg, &s), -CNL_ECONFIG);
	for (int r = 0; r < CNL_WHY_COUNT_; r++)
		assert_string_not_equal(cnl_reason_text(r), "unknown");
	cnl_sched_config_default(&cfg);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_start_and_explain),
	    T(test_priority_classes_are_strict),
	    T(test_invalid_and_unplaceable),
	    T(test_wait_for_cordoned_nodes),
	    T(test_running_job_without_allocation),
	    T(test_fairshare_heavy_yesterday_yields),
	    T(test_fairshare_idle_cluster_fully_usable),
	    T(test_fairshare_burst_cannot_jump),
	    T(test_fifo_policy_ignores_fairshare),
	    T(test_deadline_reserves_forward),
	    T(test_deadline_preempts_when_waiting_misses),
	    T(test_deadline_infeasible_reported),
	    T(test_deadline_without_runtime_is_start_by),
	    T(test_admit_counts_preemptible_work),
	    T(test_preemption_picks_cheapest_victims),
	    T(test_preemption_fewest_then_least_lost),
	    T(test_preemption_honours_min_runtime_and_class_gap),
	    T(test_backfill_only_where_no_reservation_is_delayed),
	    T(test_packing_and_power_down),
	    T(test_data_locality),
	    T(test_preferred_nodes),
	    T(test_gpu_type_constraint),
	    T(test_cpu_does_not_strand_gpus),
	    T(test_gang_placed_together_by_network_distance),
	    T(test_gang_all_or_nothing),
	    T(test_gang_spread_distinct_nodes),
	    T(test_gang_spread_waits_for_nodes),
	    T(test_determinism),
	    T(test_config_and_registry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
