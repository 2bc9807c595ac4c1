/*
 * restart_bench.c - cnlabd at 100k pending: how long a restart takes, how
 * fast submissions go, and how long a GET of one job waits under submit
 * load; each figure beside a baseline measured in the same run.
 *
 * The bench starts the cnlabd binary as a child on 127.0.0.1, port 0,
 * with a fresh data directory under /tmp, logs in as the bootstrap
 * administrator and creates a project.  Then, for each size (0, then
 * --half, then --pending jobs pending):
 *
 *   1. cnlabd is stopped (SIGTERM) and the store filled up to the size
 *      directly through the store API (src/store), in one transaction:
 *      what many submissions and cycles would have left, without waiting
 *      for them: each job with the wait-reason decision the cycle gave
 *      the jobs submitted at 0 pending ("pending: ...", audit log);
 *   2. cnlabd is started again, timed from the spawn to its "listening"
 *      line (it prints it once the controller has loaded every pending
 *      job from the store): the restart time, in wall seconds and in
 *      the CPU seconds the daemon used (on a shared machine the wall time
 *      includes other processes' turns);
 *   3. --jobs submissions over --clients keep-alive connections, through
 *      the real HTTP API, each durable before its 201: submissions/s.
 *
 * The baselines: the restart of the same daemon over the same store
 * holding no job, and submissions/s with (almost) nothing pending.
 *
 * At the largest size, one more client GETs one job (GET /v1/jobs/{id},
 * the job's document with its live status) over and over while the
 * submitters run; then, under the same load, GET /healthz: p50, p99 and
 * max of each.  The job GET is authorized and reads the store and the
 * controller; /healthz touches neither, so it shows what waiting behind
 * the submissions costs any request.
 *
 * Nothing is retried: every submission must answer 201, every GET 200,
 * else the bench says what went wrong and exits 1.  It never gates the
 * test suite; docs/benchmarks.md holds its figures.
 */
#define _GNU_SOURCE /* pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bench_http.h"

#include "common/id.h"
#include "store/store.h"

#ifndef CNL_CNLABD_PATH
#define CNL_CNLABD_PATH "cnlabd"
#endif

#define SECRET   "restart-bench secret, at least 32 bytes long"
#define PASSWORD "restart-bench-password"

extern char **environ;

static pid_t daemon_pid = -1;
static char data_dir[] = "/tmp/cnlab-restart-XXXXXX";
static bool data_dir_made;
static const char *cnlabd = CNL_CNLABD_PATH;

static char project_id[CNL_ID_MAX], user_id[CNL_ID_MAX];
/* The wait reason the cycle gave the jobs submitted at 0 pending, as its
 * audit record words it ("pending: ..."): the filled jobs get the same. */
static char reason[CNL_STORE_AUDIT_MAX];

static void remove_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char sub[512];

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (e->d_type == DT_DIR)
			remove_tree(sub);
		else
			unlink(sub);
	}
	closedir(d);
	rmdir(path);
}

static void stop_daemon(void)
{
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = -1;
	}
}

static void cleanup(void)
{
	stop_daemon();
	if (data_dir_made)
		remove_tree(data_dir);
	data_dir_made = false;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: restart_bench [--cnlabd PATH] [--pending N] "
	        "[--jobs N] [--clients N]\n"
	        "\n"
	        "cnlabd with N jobs pending (filled straight into its "
	        "store): restart time,\n"
	        "submissions/s at N/2 and N pending, GET of one job "
	        "p50/p99/max under\n"
	        "submit load; beside the restart of an empty store, "
	        "submissions/s at 0\n"
	        "pending and GET /healthz under the same load.\n"
	        "\n"
	        "  --cnlabd PATH  the daemon binary (default %s)\n"
	        "  --pending N    the largest size (default 100000)\n"
	        "  --jobs N       submissions per size (default 2000)\n"
	        "  --clients N    concurrent submitters (default 8)\n"
	        "  --help         show this help\n",
	        CNL_CNLABD_PATH);
}

static long parse_count(const char *s, const char *what, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > max)
		bench_die("%s: want an integer in 1..%ld, got \"%s\"", what,
		          max, s);
	return v;
}

/* ---- the daemon ---------------------------------------------------------- */

/* The CPU seconds (user + system) process @pid has used so far: on a
 * shared machine, wall time counts other processes' turns too. */
static double cpu_seconds(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* After the command name in parentheses: state is field 3, utime
	 * and stime fields 14 and 15. */
	if (!(p = strrchr(buf, ')')) ||
	    sscanf(p + 1,
	           " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
	           &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds cnlabd took to start, set by start_daemon(). */
static double start_cpu;

/* Start cnlabd over the data directory; the seconds until it listens. */
static double start_daemon(void)
{
	posix_spawn_file_actions_t fa;
	char log[sizeof(data_dir) + 16], line[128];
	char *argv[] = {(char *)cnlabd, "--data-dir",
	                data_dir,       "--listen",
	                "127.0.0.1:0",  "--bootstrap-admin",
	                "root",         "--log-level",
	                "warn",         NULL};
	unsigned port;
	int pfd[2], r;
	double t0;
	FILE *out;

	snprintf(log, sizeof(log), "%s/cnlabd.log", data_dir);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		bench_die("pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log,
	                                 O_WRONLY | O_CREAT | O_APPEND, 0600);
	t0 = bench_now_s();
	r = posix_spawn(&daemon_pid, cnlabd, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (r != 0) {
		daemon_pid = -1;
		bench_die("cannot start %s: %s", cnlabd, strerror(r));
	}
	if (!(out = fdopen(pfd[0], "r")))
		bench_die("fdopen: %s", strerror(errno));
	if (!fgets(line, sizeof(line), out) ||
	    sscanf(line, "listening on 127.0.0.1:%u", &port) != 1) {
		FILE *f = fopen(log, "r");
		int ch;

		while (f && (ch = fgetc(f)) != EOF)
			fputc(ch, stderr);
		if (f)
			fclose(f);
		bench_die("%s did not start", cnlabd);
	}
	t0 = bench_now_s() - t0;
	start_cpu = cpu_seconds(daemon_pid);
	fclose(out);
	snprintf(bench_base_url, sizeof(bench_base_url), "http://127.0.0.1:%u",
	         port);
	return t0;
}

/* ---- HTTP ---------------------------------------------------------------- */

/* ---- filling the store --------------------------------------------------- */

/* Add pending jobs to the stopped daemon's store until it holds @target. */
static void fill(int have, int target)
{
	struct cnl_store *s;
	struct cnl_id_gen ids;
	struct cnl_store_job j = {0}, got;
	char path[sizeof(data_dir) + 16], err[256];
	int64_t now;
	struct timespec ts;
	int r;

	snprintf(path, sizeof(path), "%s/cnlab.db", data_dir);
	if ((r = cnl_store_open_sqlite(path, &s, err, sizeof(err))) < 0)
		bench_die("open %s: %s", path, err);
	if (!user_id[0]) {
		struct cnl_store_user u;

		if (cnl_store_user_get_by_name(s, "root", &u) < 0)
			bench_die("no user root in the store");
		memcpy(user_id, u.id, sizeof(user_id));
	}
	cnl_id_gen_init_random(&ids);
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	memcpy(j.project_id, project_id, sizeof(j.project_id));
	memcpy(j.user_id, user_id, sizeof(j.user_id));
	snprintf(j.gpu_shape, sizeof(j.gpu_shape), "h100-25");
	snprintf(j.state, sizeof(j.state), "pending");
	snprintf(j.run, sizeof(j.run),
	         "{\"preemptible\":true,\"cpu_milli\":1000,\"mem_mib\":1024}");
	if (cnl_store_tx_begin(s) < 0)
		bench_die("begin: %s", cnl_store_errmsg(s));
	for (int i = have; i < target; i++) {
		j.priority = i % 4;
		j.created_ms = j.updated_ms = now - (target - i);
		snprintf(j.command, sizeof(j.command), "filled job %d", i);
		if (cnl_id_new(&ids, "job", j.created_ms, j.id, sizeof(j.id)) <
		        0 ||
		    cnl_store_job_create(s, &j, NULL, &got) < 0)
			bench_die("job %d: %s", i, cnl_store_errmsg(s));
		/* As a cycle would have recorded it: a filled job is one
		 * that waited through cycles, not a new one. */
		if (reason[0]) {
			struct cnl_store_audit a = {.ts_ms = j.created_ms};

			snprintf(a.actor, sizeof(a.actor), "scheduler");
			snprintf(a.action, sizeof(a.action), "sched.slice");
			snprintf(a.target, sizeof(a.target), "%s", j.id);
			snprintf(a.result, sizeof(a.result), "%s", reason);
			if (cnl_store_audit_append(s, &a, NULL) < 0)
				bench_die("audit %d: %s", i,
				          cnl_store_errmsg(s));
		}
	}
	if (cnl_store_tx_commit(s) < 0)
		bench_die("commit: %s", cnl_store_errmsg(s));
	cnl_store_close(s);
}

/* The "pending: ..." decision of job @id, waiting up to 30 s for it. */
static void find_reason(const char *id)
{
	char url[512], errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *h;
	struct bench_buf b = {0};
	CURL *c = bench_handle_new(&b, &h, errbuf, 300L);

	snprintf(url, sizeof(url), "%s/v1/jobs/%s/decisions", bench_base_url,
	         id);
	for (int tries = 0; !reason[0] && tries < 300; tries++) {
		json_t *o, *it;
		size_t i;

		if (bench_request(c, &b, url, NULL) != 200)
			bench_die("GET decisions of %s: %s", id,
			          b.p ? b.p : errbuf);
		o = json_loads(b.p, 0, NULL);
		json_array_foreach (json_object_get(o, "items"), i, it) {
			const char *d =
			    json_string_value(json_object_get(it, "decision"));

			if (d && strncmp(d, "pending: ", 9) == 0 &&
			    strlen(d) < sizeof(reason))
				memcpy(reason, d, strlen(d) + 1);
		}
		json_decref(o);
		if (!reason[0])
			usleep(100000);
	}
	if (!reason[0])
		bench_die("job %s never got a wait reason", id);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b.p);
}

/* ---- load ---------------------------------------------------------------- */

enum kind { SUBMIT, GET_JOB, GET_HEALTHZ };

struct worker {
	pthread_t tid;
	int index, n; /* n requests; 0: until *stop */
	enum kind kind;
	pthread_barrier_t *start;
	atomic_bool *stop;
	double *lat_ms; /* n latencies, or grown as it goes */
	int done, cap;
	char job[CNL_ID_MAX];     /* GET_JOB: which */
	char last_id[CNL_ID_MAX]; /* SUBMIT: the last job made */
	char err[512];
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	char url[256], body[256], errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *h;
	struct bench_buf b = {0};
	CURL *c = bench_handle_new(&b, &h, errbuf, 300L);
	long want = w->kind == SUBMIT ? 201 : 200, st;

	if (w->kind == SUBMIT)
		snprintf(url, sizeof(url), "%s/v1/projects/%s/jobs",
		         bench_base_url, project_id);
	else if (w->kind == GET_JOB)
		snprintf(url, sizeof(url), "%s/v1/jobs/%s", bench_base_url,
		         w->job);
	else
		snprintf(url, sizeof(url), "%s/healthz", bench_base_url);
	pthread_barrier_wait(w->start);
	for (int i = 0; w->n ? i < w->n : !atomic_load(w->stop); i++) {
		double t;

		if (w->kind == SUBMIT)
			snprintf(body, sizeof(body),
			         "{\"command\":\"bench client %d job %d\","
			         "\"gpu\":\"h100-25\",\"priority\":%d}",
			         w->index, i, i % 4);
		t = bench_now_s();
		st = bench_request(c, &b, url, w->kind == SUBMIT ? body : NULL);
		t = (bench_now_s() - t) * 1e3;
		if (w->done == w->cap) {
			w->cap = w->cap ? 2 * w->cap : 1024;
			w->lat_ms =
			    realloc(w->lat_ms, (size_t)w->cap * sizeof(double));
			if (!w->lat_ms)
				bench_die("out of memory");
		}
		w->lat_ms[w->done++] = t;
		if (st != want) {
			snprintf(w->err, sizeof(w->err),
			         "client %d request %d: %s%ld (want %ld) %s",
			         w->index, i, st < 0 ? "curl error " : "",
			         st < 0 ? -st : st, want,
			         st < 0 ? errbuf : (b.p ? b.p : ""));
			break;
		}
		if (w->kind == SUBMIT &&
		    bench_json_field(b.p, "id", w->last_id,
		                     sizeof(w->last_id)) < 0) {
			snprintf(w->err, sizeof(w->err), "no id in %s",
			         b.p ? b.p : "");
			break;
		}
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b.p);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct stats {
	double rate, p50, p99, max;
	int n;
};

static struct stats stats_of(double *v, int n, double seconds)
{
	struct stats s = {0};
	int k99 = (int)(0.99 * n + 0.999999);

	if (!n)
		return s;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	s.n = n;
	s.rate = n / seconds;
	s.p50 = v[(n + 1) / 2 - 1];
	s.p99 = v[k99 < 1 ? 0 : k99 - 1];
	s.max = v[n - 1];
	return s;
}

/*
 * @clients submitters share @jobs submissions; with @probe (GET_JOB or
 * GET_HEALTHZ) one more client repeats that GET until they are done.
 * The submitters' figures into *@ret_sub, the probe's into *@ret_probe.
 */
static void run_load(int clients, int jobs, enum kind probe, const char *job,
                     struct stats *ret_sub, struct stats *ret_probe,
                     char *ret_last)
{
	int nw = clients + (probe != SUBMIT);
	struct worker *w = calloc((size_t)nw, sizeof(*w));
	pthread_barrier_t start;
	atomic_bool stop = false;
	double t0, secs;
	double *all = malloc((size_t)jobs * sizeof(double));
	int n = 0;

	if (!w || !all)
		bench_die("out of memory");
	pthread_barrier_init(&start, NULL, (unsigned)nw + 1);
	for (int i = 0; i < nw; i++) {
		w[i].index = i;
		w[i].start = &start;
		w[i].stop = &stop;
		if (i < clients) {
			w[i].kind = SUBMIT;
			w[i].n = jobs / clients + (i < jobs % clients);
		} else {
			w[i].kind = probe;
			snprintf(w[i].job, sizeof(w[i].job), "%s",
			         job ? job : "");
		}
		if (pthread_create(&w[i].tid, NULL, worker_run, &w[i]) != 0)
			bench_die("pthread_create failed");
	}
	pthread_barrier_wait(&start);
	t0 = bench_now_s();
	for (int i = 0; i < clients; i++)
		pthread_join(w[i].tid, NULL);
	secs = bench_now_s() - t0;
	atomic_store(&stop, true);
	for (int i = clients; i < nw; i++)
		pthread_join(w[i].tid, NULL);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < nw; i++)
		if (w[i].err[0])
			bench_die("%s", w[i].err);
	for (int i = 0; i < clients; i++) {
		memcpy(all + n, w[i].lat_ms,
		       (size_t)w[i].done * sizeof(double));
		n += w[i].done;
	}
	*ret_sub = stats_of(all, n, secs);
	if (ret_last)
		snprintf(ret_last, CNL_ID_MAX, "%s", w[0].last_id);
	if (probe != SUBMIT)
		*ret_probe = stats_of(w[clients].lat_ms, w[clients].done, secs);
	for (int i = 0; i < nw; i++)
		free(w[i].lat_ms);
	free(all);
	free(w);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"cnlabd", required_argument, NULL, 'd'},
	    {"pending", required_argument, NULL, 'p'},
	    {"jobs", required_argument, NULL, 'j'},
	    {"clients", required_argument, NULL, 'c'},
	    {NULL, 0, NULL, 0},
	};
	int pending = 100000, jobs = 2000, clients = 8, c, have = 0;
	int sizes[3];
	double restart[3], restart_cpu[3];
	struct stats sub[3], none, get_job, get_hz, sub_job, sub_hz;
	char job[CNL_ID_MAX] = "";

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'd':
			cnlabd = optarg;
			break;
		case 'p':
			pending =
			    (int)parse_count(optarg, "--pending", 1000000);
			break;
		case 'j':
			jobs = (int)parse_count(optarg, "--jobs", 1000000);
			break;
		case 'c':
			clients = (int)parse_count(optarg, "--clients", 1000);
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (clients > jobs)
		bench_die("--clients %d exceeds --jobs %d", clients, jobs);
	sizes[0] = 0;
	sizes[1] = pending / 2;
	sizes[2] = pending;

	atexit(cleanup);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		bench_die("curl_global_init failed");
	if (!mkdtemp(data_dir))
		bench_die("mkdtemp %s: %s", data_dir, strerror(errno));
	data_dir_made = true;
	if (setenv("CNLAB_JWT_SECRET", SECRET, 1) < 0 ||
	    setenv("CNLAB_ADMIN_PASSWORD", PASSWORD, 1) < 0)
		bench_die("setenv: %s", strerror(errno));
	start_daemon();
	bench_login(PASSWORD, project_id, sizeof(project_id));

	printf("cnlabd %s, data directory %s\n%d submissions per size over "
	       "%d clients\n\n",
	       cnlabd, data_dir, jobs, clients);
	fflush(stdout);
	for (int i = 0; i < 3; i++) {
		stop_daemon();
		if (sizes[i] > have) {
			fill(have, sizes[i]);
			have = sizes[i];
		}
		restart[i] = start_daemon();
		restart_cpu[i] = start_cpu;
		run_load(clients, jobs, SUBMIT, NULL, &sub[i], &none,
		         i == 2 ? NULL : job);
		have += jobs;
		if (i == 0)
			find_reason(job);
		fprintf(stderr,
		        "restart_bench: %d pending: restart %.3f s (%.3f s "
		        "CPU), %.0f submissions/s\n",
		        sizes[i], restart[i], restart_cpu[i], sub[i].rate);
	}
	/* Under submit load at the largest size: one job, then /healthz. */
	run_load(clients, jobs, GET_JOB, job, &sub_job, &get_job, NULL);
	run_load(clients, jobs, GET_HEALTHZ, NULL, &sub_hz, &get_hz, NULL);

	printf("| measure | at %d pending | baseline (same run) |\n", pending);
	printf("|---|---:|---:|\n");
	printf("| cnlabd restart, s | %.3f | %.3f (empty store) |\n",
	       restart[2], restart[0]);
	printf("| cnlabd restart, CPU s | %.3f | %.3f (empty store) |\n",
	       restart_cpu[2], restart_cpu[0]);
	printf("| cnlabd restart at %d pending, s (CPU s) | %.3f (%.3f) | "
	       "%.3f (%.3f) (empty store) |\n",
	       sizes[1], restart[1], restart_cpu[1], restart[0],
	       restart_cpu[0]);
	printf("| submissions/s at %d pending | %.0f | %.0f (0 pending) |\n",
	       sizes[1], sub[1].rate, sub[0].rate);
	printf("| submissions/s at %d pending | %.0f | %.0f (0 pending) |\n",
	       sizes[2], sub[2].rate, sub[0].rate);
	printf("| submission p50 / p99 ms at %d pending | %.2f / %.2f | "
	       "%.2f / %.2f (0 pending) |\n",
	       sizes[2], sub[2].p50, sub[2].p99, sub[0].p50, sub[0].p99);
	printf("| GET one job under submit load, p50 / p99 / max ms (%d "
	       "GETs) | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f (GET "
	       "/healthz, %d GETs) |\n",
	       get_job.n, get_job.p50, get_job.p99, get_job.max, get_hz.p50,
	       get_hz.p99, get_hz.max, get_hz.n);
	printf("| submissions/s during the GETs | %.0f | %.0f |\n",
	       sub_job.rate, sub_hz.rate);
	return 0;
}
