/*
 * test_sched_sim.c - randomized runs of the scheduler in virtual time.
 *
 * A 16-GPU cluster is kept busy by random preemptible background work
 * (low and normal class, block slices and whole GPUs, several teams) while
 * high-class jobs with deadlines arrive.  Every 10 virtual minutes jobs
 * finish, the scheduler runs, and its decisions are applied as cnlabd
 * would.  Asserted, every step: the allocator's invariants hold; every
 * pending job has exactly one decision; a START names a live allocation of
 * the job's shape; a PREEMPT names a running, preemptible job of a lower
 * class that has run its minimum time.  At the end: every deadline job
 * that cnl_sched_admit() accepted finished by its deadline, and the run
 * exercised pre-emption, reservations and backfill.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/sched.h"

#define MIN   (60LL * 1000)
#define H     (60 * MIN)
#define STEP  (10 * MIN)
#define STEPS 300
#define MAXJ  4096

struct simjob {
	struct cnl_job j;
	bool admitted; /* deadline accepted at submission */
	bool finished;
	int64_t finish;
};

static struct simjob sj[MAXJ];
static struct cnl_job view[MAXJ];
static size_t n_sj;
static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static int below(int n)
{
	return (int)(next() % (uint64_t)n);
}

struct stats {
	int starts, preempts, reserved, backfilled, deadlines, met;
};

static void run(uint64_t seed, struct stats *st)
{
	struct cnl_catalog cat;
	struct cnl_cluster *c;
	struct cnl_sched *s;
	struct cnl_sched_config cfg;
	struct cnl_decisions dec = {0};
	char err[256];
	int64_t t0 = 500 * H;

	rng = seed * 0x9E3779B97F4A7C15ULL + 7;
	n_sj = 0;
	cnl_catalog_init(&cat);
	assert_int_equal(cnl_cluster_new(&cat, &c), 0);
	for (int i = 0; i < 4; i++) {
		char name[8] = {'n', (char)('0' + i), 0};
		struct cnl_node_spec spec = {.name = name,
		                             .gpu_type =
		                                 cnl_catalog_find(&cat, "L4"),
		                             .n_gpus = 4,
		                             .cpu_milli = 64000,
		                             .mem_mib = 256 * 1024,
		                             .cluster = "c",
		                             .zone = "z",
		                             .rack = i < 2 ? "r1" : "r2"};
		assert_true(cnl_cluster_add_node(c, &spec) >= 0);
	}
	cnl_sched_config_default(&cfg);
	assert_int_equal(cnl_sched_new(&cfg, &s), 0);
	int64_t last_deadline_arrival = 0;

	int64_t t_end = t0 + STEPS * STEP;
	int step = 0;
	for (int64_t now = t0, next; now < t_end; now = next) {
		/* Arrivals come on the 10-minute grid; cycles also run
		 * whenever work ends, as cnlabd does on completion. */
		bool on_grid = (now - t0) % STEP == 0;
		step++;
		/* Finish what is done, charging usage to fair share. */
		for (size_t i = 0; i < n_sj; i++) {
			struct cnl_job *j = &sj[i].j;
			if (j->state != CNL_JOB_RUNNING || sj[i].finished ||
			    j->start_ms + j->runtime_ms > now)
				continue;
			const struct cnl_alloc *a =
			    cnl_alloc_get(c, j->alloc_id);
			assert_non_null(a);
			cnl_fs_charge(cnl_sched_fairshare(s), j->req.project,
			              cnl_alloc_blocks_held(c, a), j->start_ms,
			              j->start_ms + j->runtime_ms);
			assert_int_equal(cnl_alloc_free(c, j->alloc_id), 0);
			sj[i].finished = true;
			sj[i].finish = j->start_ms + j->runtime_ms;
		}
		/* Background arrivals. */
		for (int k = on_grid ? below(4) : 0; k > 0 && n_sj < MAXJ - 2;
		     k--) {
			struct simjob *x = &sj[n_sj++];
			memset(x, 0, sizeof(*x));
			x->j.id = n_sj;
			x->j.state = CNL_JOB_PENDING;
			x->j.prio = (uint8_t)below(2); /* low or normal */
			x->j.preemptible = true;
			x->j.req.gpu_type = CNL_GPU_TYPE_ANY;
			x->j.req.project = 1 + (uint32_t)below(4);
			x->j.req.cpu_milli = 1000 * (1 + below(8));
			x->j.req.mem_mib = 1024 * (1 + below(16));
			if (below(2)) {
				x->j.req.kind = CNL_REQ_BLOCKS;
				x->j.req.blocks = 1 + below(100);
			} else {
				x->j.req.kind = CNL_REQ_WHOLE;
				x->j.req.gpus = 1 + below(2);
			}
			x->j.submit_ms = now;
			x->j.runtime_ms = (1 + below(36)) * STEP;
		}
		/* A deadline job now and then (sparse: capacity allows). */
		if (on_grid && now - last_deadline_arrival >= 30 * MIN &&
		    below(3) == 0 && n_sj < MAXJ) {
			struct simjob *x = &sj[n_sj++];
			memset(x, 0, sizeof(*x));
			x->j.id = n_sj;
			x->j.state = CNL_JOB_PENDING;
			x->j.prio = CNL_PRIO_HIGH;
			x->j.req.gpu_type = CNL_GPU_TYPE_ANY;
			x->j.req.project = 9;
			x->j.req.cpu_milli = 2000;
			x->j.req.mem_mib = 4096;
			x->j.req.kind = CNL_REQ_WHOLE;
			x->j.req.gpus = 1;
			x->j.submit_ms = now;
			x->j.runtime_ms = (6 + below(12)) * STEP;
			x->j.deadline_ms = now + x->j.runtime_ms +
			                   cfg.grace_ms +
			                   (1 + below(36)) * STEP;
			size_t na = 0;
			for (size_t i = 0; i + 1 < n_sj; i++)
				if (!sj[i].finished)
					view[na++] = sj[i].j;
			int64_t est;
			int ar =
			    cnl_sched_admit(s, c, view, na, &x->j, now, &est);
			assert_true(ar == 0 || ar == -CNL_EDEADLINE);
			x->admitted = ar == 0;
			st->deadlines += x->admitted;
			last_deadline_arrival = now;
		}
		/* The scheduler sees pending and running jobs. */
		size_t nv = 0;
		size_t idx[MAXJ];
		for (size_t i = 0; i < n_sj; i++)
			if (!sj[i].finished) {
				idx[nv] = i;
				view[nv++] = sj[i].j;
			}
		assert_int_equal(
		    cnl_sched_cycle(s, c, view, nv, now, seed, &dec), 0);
		if (cnl_cluster_check(c, err, sizeof(err)) != 0)
			fail_msg("seed %llu cycle %d: %s",
			         (unsigned long long)seed, step, err);
		/* One decision per pending job. */
		uint8_t seen[MAXJ] = {0};
		for (size_t i = 0; i < dec.n; i++) {
			const struct cnl_decision *d = &dec.d[i];
			if (d->kind == CNL_DEC_POWER_DOWN)
				continue;
			assert_true(d->job < nv);
			struct cnl_job *j = &sj[idx[d->job]].j;
			if (d->kind == CNL_DEC_PREEMPT) {
				assert_int_equal(j->state, CNL_JOB_RUNNING);
				assert_true(j->preemptible);
				const struct cnl_job *f = &view[d->for_job];
				assert_true(j->prio < f->prio);
				assert_true(now - j->start_ms >=
				            cfg.min_run_ms);
				assert_int_equal(d->kill_ms,
				                 now + cfg.grace_ms);
				/* Requeued; restarts from the beginning. */
				j->state = CNL_JOB_PENDING;
				j->alloc_id = 0;
				st->preempts++;
				continue;
			}
			assert_int_equal(j->state, CNL_JOB_PENDING);
			assert_int_equal(seen[d->job]++, 0);
			if (d->kind == CNL_DEC_START) {
				const struct cnl_alloc *a =
				    cnl_alloc_get(c, d->alloc_id);
				assert_non_null(a);
				assert_int_equal(a->project, j->req.project);
				assert_int_equal(a->req_kind, j->req.kind);
				j->state = CNL_JOB_RUNNING;
				j->alloc_id = d->alloc_id;
				j->start_ms = d->at_ms;
				st->starts++;
				st->backfilled +=
				    d->reason == CNL_WHY_BACKFILLED;
			} else {
				assert_int_equal(d->kind, CNL_DEC_WAIT);
				st->reserved += d->reason == CNL_WHY_RESERVED;
			}
		}
		for (size_t i = 0; i < nv; i++)
			if (view[i].state == CNL_JOB_PENDING)
				assert_int_equal(seen[i], 1);
		/* The next event: the grid, or the first end after now. */
		next = now - (now - t0) % STEP + STEP;
		for (size_t i = 0; i < n_sj; i++) {
			const struct cnl_job *j = &sj[i].j;
			int64_t e = j->start_ms + j->runtime_ms;
			if (j->state == CNL_JOB_RUNNING && !sj[i].finished &&
			    e > now && e < next)
				next = e;
		}
	}
	/* Every admitted deadline was met. */
	for (size_t i = 0; i < n_sj; i++) {
		const struct simjob *x = &sj[i];
		if (!x->admitted)
			continue;
		if (!x->finished && x->j.deadline_ms > t0 + STEPS * STEP)
			continue; /* still in time when the run ended */
		if (!x->finished || x->finish > x->j.deadline_ms)
			fail_msg("seed %llu: job %llu missed its deadline "
			         "(finished %d at %lld, deadline %lld)",
			         (unsigned long long)seed,
			         (unsigned long long)x->j.id, x->finished,
			         (long long)x->finish,
			         (long long)x->j.deadline_ms);
		st->met++;
	}
	cnl_decisions_done(&dec);
	cnl_sched_free(s);
	cnl_cluster_free(c);
}

static void test_random_runs(void **state)
{
	struct stats st = {0};
	(void)state;
	for (uint64_t seed = 1; seed <= 6; seed++)
		run(seed, &st);
	print_message("starts %d, pre-emptions %d, reservations %d, "
	              "backfilled %d, deadlines admitted %d, met %d\n",
	              st.starts, st.preempts, st.reserved, st.backfilled,
	              st.deadlines, st.met);
	assert_true(st.preempts > 0);
	assert_true(st.reserved > 0);
	assert_true(st.backfilled > 0);
	assert_true(st.met > 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_random_runs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
