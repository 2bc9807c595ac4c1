/*
 * sched_bench.c - scheduler speed on a cluster shaped like the Alibaba
 * openb trace (1,213 GPU nodes, 6,212 GPUs) with 10,000 pending jobs.
 *
 *   placements/s  one cycle on the empty cluster with 10,000 pending jobs
 *                 drawn from the trace's default pod list: starts / time.
 *   full cycle    the cluster full of the first cycle's work (running) and
 *                 10,000 jobs pending again: the time of one cycle, a
 *                 minute later (no running work is past its minimum run
 *                 time, so none may be pre-empted) and an hour later (a
 *                 pre-emption storm: ~1,500 high-class jobs find victims).
 *                 The cycle is cnlabd's (cnl_sched_cycle_inc) on a fresh
 *                 scheduler, so nothing is kept from earlier cycles; the
 *                 from-scratch cycle (cnl_sched_cycle) is printed beside
 *                 it.  Cycles are timed in CPU time of the thread (the
 *                 machine may be shared), as the steady state is.  The
 *                 process keeps the memory it frees, as cnlabd does
 *                 (cnl_heap_keep()), so a fresh scheduler's buffers come
 *                 from the heap, not from new pages.
 *
 * Each figure is measured for the default "cnlab" policy and, in the same
 * run, for the "fifo" policy as a baseline (same cycle machinery, no fair
 * share, plain best fit), and printed with the ratio.  Jobs get teams from
 * a hash of the pod name (20 teams), mostly normal priority with some low,
 * high and critical, 5% with deadlines, and a run time from the trace
 * (deletion - scheduled) or 1 h.  Every cycle runs 5 times; the median is
 * reported.
 *
 * steady state  10,000 and then 100,000 jobs pending on the full cluster,
 *               cycles a second apart with 20 jobs ended and 20 submitted
 *               between two: the p50/p99 CPU time of the incremental cycle
 *               (cnl_sched_cycle_inc, what cnlabd runs) beside the
 *               from-scratch cycle (cnl_sched_cycle, the old path) on the
 *               same input, and whether their decisions were identical
 *               (the bench fails if not).  The incremental cycle's first
 *               (a fresh scheduler's, which builds what later ones keep)
 *               is printed apart, not in its percentiles.
 *
 * Environment: CNL_BENCH_STEADY_ONLY=1 runs the steady state alone;
 * CNL_BENCH_STEADY_PENDING=N only the size N; CNL_BENCH_CYCLES=K K cycles
 * per size; CNL_BENCH_INC_ONLY=1 the incremental cycle alone (profiling);
 * CNL_BENCH_PHASE=0 (a minute later) or 1 (an hour later) one full-cluster
 * phase alone.
 *
 * Usage: sched_bench [TRACE_DIR]  (default ../shared/traces/alibaba-gpu-v2023
 * beside the source tree)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "sched/sched.h"
#include "sim/trace.h"

#define PENDING 10000
#define REPEAT  5
#define H       (3600LL * 1000)

static uint64_t rng = 0x5eed;

static uint64_t next(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static uint32_t hash_name(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* CPU time of this thread: the machine the bench runs on may be shared,
 * and a cycle is one thread's work. */
static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct world {
	struct cnl_catalog cat;
	struct cnl_cluster *c;
	struct cnl_trace_pod *pods;
	size_t n_pods;
};

static int load(struct world *w, const char *dir)
{
	char path[4096], err[512];
	int r;

	cnl_catalog_init(&w->cat);
	if (cnl_cluster_new(&w->cat, &w->c) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/csv/openb_node_list_gpu_node.csv",
	         dir);
	if ((r = cnl_trace_load_nodes(path, &w->cat, w->c, err, sizeof(err))) <
	    0) {
		fprintf(stderr, "sched_bench: %s\n", err);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/csv/openb_pod_list_default.csv", dir);
	if ((r = cnl_trace_load_pods(path, &w->cat, &w->pods, &w->n_pods, err,
	                             sizeof(err))) < 0) {
		fprintf(stderr, "sched_bench: %s\n", err);
		return -1;
	}
	return 0;
}

/* `n` pending jobs resampled from the pods (GPU pods only). */
static void make_jobs(const struct world *w, struct cnl_job *jobs, size_t n,
                      int64_t now, uint64_t seed)
{
	rng = seed;
	for (size_t i = 0; i < n; i++) {
		const struct cnl_trace_pod *p;
		do
			p = &w->pods[next() % w->n_pods];
		while (p->num_gpu == 0);
		struct cnl_job *j = &jobs[i];
		memset(j, 0, sizeof(*j));
		j->id = i + 1;
		j->state = CNL_JOB_PENDING;
		uint32_t team = 1 + hash_name(p->name) % 20;
		cnl_trace_pod_req(&w->cat, p, team, &j->req);
		int r = (int)(next() % 100);
		j->prio = r < 10   ? CNL_PRIO_LOW
		          : r < 85 ? CNL_PRIO_NORMAL
		          : r < 97 ? CNL_PRIO_HIGH
		                   : CNL_PRIO_CRITICAL;
		j->preemptible = j->prio <= CNL_PRIO_NORMAL;
		j->submit_ms = now - (int64_t)(next() % (48 * H));
		j->runtime_ms = p->scheduled >= 0 && p->deletion > p->scheduled
		                    ? (p->deletion - p->scheduled) * 1000
		                    : H;
		if (next() % 100 < 5)
			j->deadline_ms =
			    now + j->runtime_ms + (int64_t)(next() % (24 * H));
	}
}

struct result {
	double seconds;
	size_t starts, waits, preempts;
	uint64_t digest; /* FNV-1a of the decisions: equal runs, equal cycles */
};

static uint64_t fnv(uint64_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++, v >>= 8)
		h = (h ^ (v & 0xff)) * 0x100000001b3ULL;
	return h;
}

/* One cycle on a fresh scheduler: from scratch (cnl_sched_cycle), or, with
 * `inc`, the cycle cnlabd runs (cnl_sched_cycle_inc; its first cycle, so
 * nothing kept from earlier ones). */
static struct result one_cycle_by(struct world *w, const char *policy,
                                  struct cnl_job *jobs, size_t n, int64_t now,
                                  struct cnl_decisions *dec, bool inc)
{
	struct cnl_sched_config cfg;
	struct cnl_sched *s;
	struct result res = {0};

	cnl_sched_config_default(&cfg);
	snprintf(cfg.policy, sizeof(cfg.policy), "%s", policy);
	if (cnl_sched_new(&cfg, &s) < 0)
		exit(1);
	double t = cpu_s();
	int rc = inc ? cnl_sched_cycle_inc(s, w->c, jobs, n, now, 42, dec)
	             : cnl_sched_cycle(s, w->c, jobs, n, now, 42, dec);
	if (rc < 0) {
		fprintf(stderr, "sched_bench: cycle failed: %s\n",
		        cnl_strerror(rc));
		exit(1);
	}
	res.seconds = cpu_s() - t;
	res.digest = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < dec->n; i++) {
		const struct cnl_decision *d = &dec->d[i];
		res.digest =
		    fnv(res.digest, (uint64_t)d->kind << 56 |
		                        (uint64_t)d->reason << 48 | d->job);
		res.digest =
		    fnv(res.digest, (uint64_t)d->node << 32 | d->alloc_id);
		res.digest = fnv(res.digest, (uint64_t)d->for_job << 32 |
		                                 (uint32_t)d->error);
		res.digest = fnv(res.digest, (uint64_t)d->at_ms);
		res.digest = fnv(res.digest, (uint64_t)d->kill_ms);
		res.starts += dec->d[i].kind == CNL_DEC_START;
		res.waits += dec->d[i].kind == CNL_DEC_WAIT;
		res.preempts += dec->d[i].kind == CNL_DEC_PREEMPT;
	}
	cnl_sched_free(s);
	return res;
}

static struct result one_cycle(struct world *w, const char *policy,
                               struct cnl_job *jobs, size_t n, int64_t now,
                               struct cnl_decisions *dec)
{
	return one_cycle_by(w, policy, jobs, n, now, dec, false);
}

/* Victims' allocations, saved before a cycle so undo() can put them back. */
static struct cnl_alloc *saved;

static void save_running(struct world *w, const struct cnl_job *jobs, size_t n)
{
	saved = realloc(saved, (n + 1) * sizeof(*saved));
	for (size_t i = 0; i < n; i++)
		if (jobs[i].state == CNL_JOB_RUNNING)
			saved[i] = *cnl_alloc_get(w->c, jobs[i].alloc_id);
}

/* Undo a cycle: its starts released, its victims restored, so the next
 * repetition sees the same world. */
static void undo(struct world *w, const struct cnl_decisions *dec)
{
	for (size_t i = dec->n; i-- > 0;)
		if (dec->d[i].kind == CNL_DEC_START)
			cnl_alloc_free(w->c, dec->d[i].alloc_id);
	for (size_t i = dec->n; i-- > 0;)
		if (dec->d[i].kind == CNL_DEC_PREEMPT &&
		    cnl_alloc_restore(w->c, &saved[dec->d[i].job]) < 0) {
			fprintf(stderr,
			        "sched_bench: cannot restore a victim\n");
			exit(1);
		}
}

static struct result median(struct result *r)
{
	double t[REPEAT];
	for (int i = 0; i < REPEAT; i++)
		t[i] = r[i].seconds;
	qsort(t, REPEAT, sizeof(t[0]), cmp_d);
	struct result m = r[0];
	m.seconds = t[REPEAT / 2];
	return m;
}

static struct result measure_fill(struct world *w, const char *policy,
                                  struct cnl_job *jobs, int64_t now)
{
	struct cnl_decisions dec = {0};
	struct result r[REPEAT];

	for (int k = 0; k < REPEAT; k++) {
		r[k] = one_cycle(w, policy, jobs, PENDING, now, &dec);
		undo(w, &dec);
	}
	cnl_decisions_done(&dec);
	return median(r);
}

/* ---- the steady state: a trickle of work between cycles ------------- */

#define TRICKLE 20 /* jobs ended and jobs submitted between two cycles */

static int cmp_double(const void *a, const void *b)
{
	return cmp_d(a, b);
}

static double pct(double *v, size_t n, double q)
{
	qsort(v, n, sizeof(*v), cmp_double);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i];
}

static bool same_decisions(const struct cnl_decisions *a,
                           const struct cnl_decisions *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++) {
		const struct cnl_decision *x = &a->d[i], *z = &b->d[i];
		if (x->kind != z->kind || x->reason != z->reason ||
		    x->job != z->job || x->node != z->node ||
		    x->for_job != z->for_job || x->at_ms != z->at_ms ||
		    x->kill_ms != z->kill_ms || x->error != z->error)
			return false;
	}
	return true;
}

/*
 * `pending` jobs wait on the full cluster left by the fill (`jobs[0, n)`,
 * its running work); `cycles` cycles a second apart, and between two of
 * them TRICKLE running jobs end and TRICKLE new jobs arrive.  Each cycle
 * runs twice on the same input: from scratch (cnl_sched_cycle, undone
 * after) and incrementally (cnl_sched_cycle_inc, applied); the decisions
 * must be the same.
 */
static int steady(struct world *w, const char *policy, struct cnl_job *base,
                  size_t n_base, size_t pending, int cycles, int64_t now)
{
	struct cnl_sched_config cfg;
	struct cnl_sched *s_old, *s_inc;
	struct cnl_decisions d_old = {0}, d_inc = {0};
	size_t cap = n_base + pending + (size_t)cycles * TRICKLE + 1, n = 0;
	struct cnl_job *jobs = calloc(cap, sizeof(*jobs));
	double *t_old = calloc((size_t)cycles, sizeof(double));
	double *t_inc = calloc((size_t)cycles, sizeof(double));
	size_t starts = 0, n_allocs = 0, n_run = 0;
	bool same = true;
	/* CNL_BENCH_INC_ONLY=1: the incremental cycle alone (profiling). */
	bool inc_only = getenv("CNL_BENCH_INC_ONLY") != NULL;
	uint64_t next_id = 1000000;

	cnl_sched_config_default(&cfg);
	snprintf(cfg.policy, sizeof(cfg.policy), "%s", policy);
	if (!jobs || !t_old || !t_inc || cnl_sched_new(&cfg, &s_old) < 0 ||
	    cnl_sched_new(&cfg, &s_inc) < 0)
		exit(1);
	struct cnl_alloc *keep_a = calloc(n_base + 1, sizeof(*keep_a));
	if (!keep_a)
		exit(1);
	for (size_t i = 0; i < n_base; i++)
		if (base[i].state == CNL_JOB_RUNNING) {
			keep_a[n_allocs++] =
			    *cnl_alloc_get(w->c, base[i].alloc_id);
			jobs[n++] = base[i];
			n_run++;
		}
	make_jobs(w, jobs + n, pending, now, 7);
	for (size_t i = n; i < n + pending; i++)
		jobs[i].id = next_id++;
	n += pending;
	rng = 99;
	for (int k = 0; k < cycles; k++) {
		int64_t t = now + 1000 * k;
		double t0 = cpu_s();
		if (!inc_only &&
		    cnl_sched_cycle(s_old, w->c, jobs, n, t, 42, &d_old) < 0)
			exit(1);
		t_old[k] = cpu_s() - t0;
		if (!inc_only)
			undo(w, &d_old);
		t0 = cpu_s();
		if (cnl_sched_cycle_inc(s_inc, w->c, jobs, n, t, 42, &d_inc) <
		    0)
			exit(1);
		t_inc[k] = cpu_s() - t0;
		same = same && (inc_only || same_decisions(&d_old, &d_inc));
		for (size_t i = 0; i < d_inc.n; i++) {
			const struct cnl_decision *d = &d_inc.d[i];
			if (d->kind != CNL_DEC_START)
				continue;
			jobs[d->job].state = CNL_JOB_RUNNING;
			jobs[d->job].alloc_id = d->alloc_id;
			jobs[d->job].start_ms = d->at_ms;
			starts++;
		}
		/* The trickle: TRICKLE running jobs end (the array keeps its
		 * order), TRICKLE new ones arrive at the end. */
		for (int e = 0; e < TRICKLE; e++) {
			size_t tries = 0, i;
			do
				i = next() % n;
			while (jobs[i].state != CNL_JOB_RUNNING &&
			       ++tries < 1000);
			if (jobs[i].state != CNL_JOB_RUNNING)
				break;
			cnl_alloc_free(w->c, jobs[i].alloc_id);
			memmove(&jobs[i], &jobs[i + 1],
			        (n - i - 1) * sizeof(*jobs));
			n--;
		}
		uint64_t keep = rng;
		make_jobs(w, jobs + n, TRICKLE, t, 1000 + (uint64_t)k);
		rng = keep;
		for (size_t i = n; i < n + TRICKLE; i++) {
			jobs[i].id = next_id++;
			jobs[i].submit_ms = t;
		}
		n += TRICKLE;
	}
	/* Put the cluster back as it was: every allocation of this run
	 * released, the base's running work restored. */
	for (size_t i = 0; i < n; i++)
		if (jobs[i].state == CNL_JOB_RUNNING)
			cnl_alloc_free(w->c, jobs[i].alloc_id);
	for (size_t i = 0; i < n_allocs; i++)
		if (cnl_alloc_restore(w->c, &keep_a[i]) < 0) {
			fprintf(stderr, "sched_bench: cannot restore\n");
			exit(1);
		}
	free(keep_a);
	(void)n_run;
	printf("  (CPU time of the cycle)\n");
	printf("  %-5s from scratch: p50 %7.1f ms  p99 %7.1f ms\n", policy,
	       pct(t_old, (size_t)cycles, 0.5) * 1e3,
	       pct(t_old, (size_t)cycles, 0.99) * 1e3);
	/* The incremental cycle's first is a fresh scheduler's: it builds
	 * what the others keep (cnlabd pays it once, after a start).  Shown
	 * apart; the percentiles are the steady state's, the cycles after. */
	double cold = t_inc[0];
	size_t warm = cycles > 1 ? (size_t)cycles - 1 : 1;
	double *t_w = cycles > 1 ? t_inc + 1 : t_inc;
	printf("  %-5s incremental:  p50 %7.1f ms  p99 %7.1f ms  "
	       "(%zu started over %d cycles; decisions %s)\n",
	       policy, pct(t_w, warm, 0.5) * 1e3, pct(t_w, warm, 0.99) * 1e3,
	       starts, cycles, same ? "identical" : "DIFFER");
	printf("  %-5s incremental, its first cycle (a fresh scheduler's, "
	       "not in the percentiles): %.1f ms\n",
	       policy, cold * 1e3);
	printf("  ratio incremental/scratch p50: %.2f\n",
	       pct(t_w, warm, 0.5) / pct(t_old, (size_t)cycles, 0.5));
	cnl_decisions_done(&d_old);
	cnl_decisions_done(&d_inc);
	cnl_sched_free(s_old);
	cnl_sched_free(s_inc);
	free(jobs);
	free(t_old);
	free(t_inc);
	return same ? 0 : 1;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1]
	                           : CNL_SOURCE_DIR
	                      "/../shared/traces/alibaba-gpu-v2023";
	struct world w;
	int64_t now = 1000 * H;
	struct cnl_job *jobs = calloc(2 * PENDING, sizeof(*jobs));
	struct cnl_decisions dec = {0};

	cnl_heap_keep(); /* as cnlabd does (util.h) */
	if (load(&w, dir) < 0)
		return 1;
	size_t gpus = 0;
	for (uint32_t i = 0; i < w.c->n_nodes; i++)
		gpus += w.c->nodes[i].n_gpus;
	printf("cluster: %u nodes, %zu GPUs (Alibaba openb); %d pending jobs "
	       "from %zu trace pods\n",
	       w.c->n_nodes, gpus, PENDING, w.n_pods);

	/* 1. Placements per second: empty cluster, 10,000 pending.
	 * (CNL_BENCH_FULL_ONLY=1 skips it, for profiling the full cycle.) */
	bool full_only = getenv("CNL_BENCH_FULL_ONLY") != NULL;
	/* CNL_BENCH_STEADY_ONLY=1 runs the steady state alone (section 3). */
	bool steady_only = getenv("CNL_BENCH_STEADY_ONLY") != NULL;
	full_only = full_only || steady_only;
	make_jobs(&w, jobs, PENDING, now, 1);
	struct result fc = {.seconds = 1}, ff = {.seconds = 1};
	if (!full_only) {
		fc = measure_fill(&w, "cnlab", jobs, now);
		ff = measure_fill(&w, "fifo", jobs, now);
	}
	printf("\nempty cluster, one cycle over %d pending jobs (median of "
	       "%d):\n",
	       PENDING, REPEAT);
	printf("  cnlab: %5zu started in %7.1f ms = %8.0f placements/s\n",
	       fc.starts, fc.seconds * 1e3, (double)fc.starts / fc.seconds);
	printf("  fifo:  %5zu started in %7.1f ms = %8.0f placements/s\n",
	       ff.starts, ff.seconds * 1e3, (double)ff.starts / ff.seconds);
	printf("  ratio cnlab/fifo placements/s: %.2f\n",
	       ((double)fc.starts / fc.seconds) /
	           ((double)ff.starts / ff.seconds));

	/* 2. A full cycle: the first cycle's work now runs; 10,000 pending
	 * jobs again (the waiting ones plus new arrivals). */
	one_cycle(&w, "cnlab", jobs, PENDING, now, &dec);
	size_t n = PENDING, n_run = 0;
	for (size_t i = 0; i < dec.n; i++)
		if (dec.d[i].kind == CNL_DEC_START) {
			struct cnl_job *j = &jobs[dec.d[i].job];
			j->state = CNL_JOB_RUNNING;
			j->alloc_id = dec.d[i].alloc_id;
			j->start_ms = dec.d[i].at_ms;
			n_run++;
		}
	/* New arrivals bring the pending count back to 10,000. */
	make_jobs(&w, jobs + n, n_run, now + 60000, 2);
	n += n_run;
	save_running(&w, jobs, n);
	struct cnl_decisions d2 = {0};
	/* 2a: a minute later (running work inside its minimum run time, so
	 * nothing may be pre-empted); 2b: an hour later, pre-emption live. */
	static const struct {
		int64_t after;
		const char *what;
	} phase[] = {{60000, "a minute later: no work old enough to "
	                     "pre-empt"},
	             {H, "an hour later: pre-emption live"}};
	/* CNL_BENCH_PHASE=0 or 1: that phase alone (profiling). */
	const char *only_ph = getenv("CNL_BENCH_PHASE");
	for (int ph = 0; ph < (steady_only ? 0 : 2); ph++) {
		struct result rc[REPEAT], rf[REPEAT], ro[REPEAT];
		if (only_ph && strtol(only_ph, NULL, 10) != ph)
			continue;
		int64_t t = now + phase[ph].after;
		for (int k = 0; k < REPEAT; k++) {
			rc[k] =
			    one_cycle_by(&w, "cnlab", jobs, n, t, &d2, true);
			undo(&w, &d2);
			rf[k] = one_cycle_by(&w, "fifo", jobs, n, t, &d2, true);
			undo(&w, &d2);
			ro[k] = one_cycle(&w, "cnlab", jobs, n, t, &d2);
			undo(&w, &d2);
		}
		struct result mc = median(rc), mf = median(rf), mo = median(ro);
		printf(
		    "\nfull cluster (%zu running), one cycle over %d pending "
		    "jobs, %s (median of %d):\n",
		    n_run, PENDING, phase[ph].what, REPEAT);
		printf("  cnlab: %7.1f ms (%zu started, %zu waiting, %zu "
		       "pre-empted; decisions %016llx)\n",
		       mc.seconds * 1e3, mc.starts, mc.waits, mc.preempts,
		       (unsigned long long)mc.digest);
		printf("  fifo:  %7.1f ms (%zu started, %zu waiting, %zu "
		       "pre-empted; decisions %016llx)\n",
		       mf.seconds * 1e3, mf.starts, mf.waits, mf.preempts,
		       (unsigned long long)mf.digest);
		printf("  ratio cnlab/fifo cycle time: %.2f\n",
		       mc.seconds / mf.seconds);
		printf("  cnlab from scratch (cnl_sched_cycle, the reference "
		       "path): %.1f ms (%zu started; decisions %016llx); "
		       "ratio incremental/scratch %.2f\n",
		       mo.seconds * 1e3, mo.starts,
		       (unsigned long long)mo.digest, mc.seconds / mo.seconds);
	}

	/* 3. The steady state: 10,000 and 100,000 pending on the full
	 * cluster, a trickle of ended and new work between cycles. */
	int bad = 0;
	static const struct {
		size_t pending;
		int cycles;
	} st[] = {{PENDING, 40}, {10 * PENDING, 15}};
	const char *only = getenv("CNL_BENCH_STEADY_PENDING");
	for (size_t k = 0; k < sizeof(st) / sizeof(st[0]); k++) {
		int cyc = st[k].cycles;
		if (only && strtoul(only, NULL, 10) != st[k].pending)
			continue;
		if (getenv("CNL_BENCH_CYCLES"))
			cyc = (int)strtol(getenv("CNL_BENCH_CYCLES"), NULL, 10);
		printf(
		    "\nsteady state, full cluster, %zu pending, %d ended and "
		    "%d new jobs between cycles (%d cycles):\n",
		    st[k].pending, TRICKLE, TRICKLE, cyc);
		bad |= steady(&w, "cnlab", jobs, n, st[k].pending, cyc,
		              now + 60000);
	}

	char err[256];
	int chk = cnl_cluster_check(w.c, err, sizeof(err));
	printf("\ninvariants: %s\n", chk == 0 ? "ok" : err);
	cnl_decisions_done(&dec);
	cnl_decisions_done(&d2);
	free(jobs);
	free(saved);
	free(w.pods);
	cnl_cluster_free(w.c);
	return chk == 0 && !bad ? 0 : 1;
}
