/*
 * submit_bench.c - job submissions per second, with p50 and p99 latency,
 * through the real cnlabd over loopback at 1, 8 and 64 concurrent clients,
 * every job durable in SQLite (WAL, group commit: the request's transaction
 * synced to disk by the syncer's fdatasync, shared with the requests of
 * its batch) before its 201.
 *
 * The bench starts the cnlabd binary as a child process on port 0 with a
 * fresh data directory under /tmp, logs in as the bootstrap administrator
 * and creates a project.  For each concurrency level, N threads each own
 * one libcurl easy handle (so one keep-alive connection) and submit their
 * share of --jobs jobs one after another; each request's latency is taken
 * with CLOCK_MONOTONIC.  The level's time runs from the moment every
 * thread is released until the last one finishes, connection set-up
 * included.  The levels share one store: each starts with the jobs of
 * the levels before it still pending (no node ever takes them).
 *
 * Baseline, measured in the same run at the same concurrency: as many
 * GET /healthz requests, which touch neither the store nor the token.  The
 * ratio of the two rates is what a submission costs over bare HTTP
 * handling: token check, role lookup, the job row and its audit records
 * in one transaction, and the wait for the batch's sync.
 *
 * Nothing is retried: every submission must answer 201 with an id never
 * seen before in the run, every /healthz 200, and at the end the project's
 * job list must hold exactly the acknowledged ids.  Otherwise the bench
 * says what went wrong and exits 1.
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

#ifndef CNL_CNLABD_PATH
#define CNL_CNLABD_PATH "cnlabd"
#endif

#define ID_MAX     64
#define SECRET     "submit-bench secret, at least 32 bytes long"
#define PASSWORD   "submit-bench-password"
#define MAX_LEVELS 16

extern char **environ;

/* The child daemon and its data directory, for cleanup on every exit. */
static pid_t daemon_pid = -1;
static char data_dir[] = "/tmp/cnlab-bench-XXXXXX";
static bool data_dir_made;

static char project_id[ID_MAX];

static void cleanup(void)
{
	DIR *d;
	struct dirent *e;

	if (daemon_pid > 0) {
		kill(daemon_pid, SIGTERM);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = -1;
	}
	if (!data_dir_made || !(d = opendir(data_dir)))
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(data_dir);
	data_dir_made = false;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: submit_bench [--cnlabd PATH] [--jobs N] "
	        "[--clients LIST]\n"
	        "\n"
	        "Job submissions per second and p50/p99 latency through a "
	        "real cnlabd\n"
	        "(started here on 127.0.0.1, port 0, data directory under "
	        "/tmp), against\n"
	        "as many GET /healthz requests at the same concurrency.\n"
	        "\n"
	        "  --cnlabd PATH    the daemon binary (default %s)\n"
	        "  --jobs N         submissions per concurrency level "
	        "(default 2000)\n"
	        "  --clients LIST   comma-separated client counts "
	        "(default 1,8,64)\n"
	        "  --help           show this help\n"
	        "\n"
	        "Exits 1, saying why, on any response other than 201 (200 for "
	        "/healthz),\n"
	        "on a repeated job id, or when the job list differs from the "
	        "acknowledged ids.\n",
	        CNL_CNLABD_PATH);
}

static long parse_count(const char *s, const char *what, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || (*end && *end != ',') || v < 1 || v > max)
		bench_die("%s: want an integer in 1..%ld, got \"%s\"", what,
		          max, s);
	return v;
}

/* ------------------------------------------------------------------------ */
/* The daemon                                                               */
/* ------------------------------------------------------------------------ */

static void start_daemon(const char *path)
{
	posix_spawn_file_actions_t fa;
	char log[sizeof(data_dir) + 16], line[128];
	char *argv[] = {(char *)path, "--data-dir",  data_dir,
	                "--listen",   "127.0.0.1:0", "--bootstrap-admin",
	                "root",       "--log-level", "warn",
	                NULL};
	unsigned port;
	int pfd[2], r;
	FILE *out;

	if (!mkdtemp(data_dir))
		bench_die("mkdtemp %s: %s", data_dir, strerror(errno));
	data_dir_made = true;
	snprintf(log, sizeof(log), "%s/cnlabd.log", data_dir);
	if (setenv("CNLAB_JWT_SECRET", SECRET, 1) < 0 ||
	    setenv("CNLAB_ADMIN_PASSWORD", PASSWORD, 1) < 0 ||
	    pipe2(pfd, O_CLOEXEC) < 0)
		bench_die("cannot set up the daemon: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log,
	                                 O_WRONLY | O_CREAT | O_TRUNC, 0600);
	r = posix_spawn(&daemon_pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (r != 0) {
		daemon_pid = -1;
		bench_die("cannot start %s: %s", path, strerror(r));
	}
	/* main.c prints "listening on HOST:PORT" once it serves. */
	if (!(out = fdopen(pfd[0], "r")))
		bench_die("fdopen: %s", strerror(errno));
	if (!fgets(line, sizeof(line), out) ||
	    sscanf(line, "listening on 127.0.0.1:%u", &port) != 1) {
		FILE *f = fopen(log, "r");
		int ch;

		/* The log goes with the data directory at exit: show it. */
		while (f && (ch = fgetc(f)) != EOF)
			fputc(ch, stderr);
		if (f)
			fclose(f);
		bench_die("%s did not start", path);
	}
	fclose(out);
	snprintf(bench_base_url, sizeof(bench_base_url), "http://127.0.0.1:%u",
	         port);
}

/* ------------------------------------------------------------------------ */
/* HTTP                                                                     */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* One concurrency level                                                    */
/* ------------------------------------------------------------------------ */

struct worker {
	pthread_t tid;
	int index, n;
	bool submit;              /* POST jobs, or GET /healthz */
	pthread_barrier_t *start; /* released together */
	double *lat_ms;           /* n latencies */
	char (*ids)[ID_MAX];      /* n job ids when submitting */
	char err[512];            /* set on the first failure */
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	char url[256], body[256], errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *h;
	struct bench_buf b = {0};
	CURL *c = bench_handle_new(&b, &h, errbuf, 120L);
	long want = w->submit ? 201 : 200, st;
	double t;

	if (w->submit)
		snprintf(url, sizeof(url), "%s/v1/projects/%s/jobs",
		         bench_base_url, project_id);
	else
		snprintf(url, sizeof(url), "%s/healthz", bench_base_url);
	pthread_barrier_wait(w->start);
	for (int i = 0; i < w->n; i++) {
		if (w->submit)
			snprintf(body, sizeof(body),
			         "{\"command\":\"bench client %d job %d\","
			         "\"gpu\":\"h100-25\",\"priority\":%d}",
			         w->index, i, i % 4);
		t = bench_now_s();
		st = bench_request(c, &b, url, w->submit ? body : NULL);
		w->lat_ms[i] = (bench_now_s() - t) * 1e3;
		if (st != want) {
			snprintf(w->err, sizeof(w->err),
			         "client %d request %d: %s%ld (want %ld) %s",
			         w->index, i, st < 0 ? "curl error " : "",
			         st < 0 ? -st : st, want,
			         st < 0 ? errbuf : (b.p ? b.p : ""));
			break;
		}
		if (w->submit && bench_json_field(b.p, "id", w->ids[i],
		                                  sizeof(w->ids[i])) < 0) {
			snprintf(w->err, sizeof(w->err),
			         "client %d request %d: no id in %s", w->index,
			         i, b.p ? b.p : "");
			break;
		}
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b.p);
	return NULL;
}

struct result {
	double seconds, rate, p50, p99;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of the sorted @v. */
static double percentile(const double *v, int n, double p)
{
	int k = (int)(p * n + 0.999999);

	return v[k < 1 ? 0 : k - 1];
}

/*
 * Run @total requests over @clients threads; job ids go to @ids (which
 * must hold @total) when @submit.  Dies on the first failure.
 */
static struct result run_level(int clients, int total, bool submit,
                               char (*ids)[ID_MAX])
{
	struct worker *w = calloc((size_t)clients, sizeof(*w));
	double *lat = calloc((size_t)total, sizeof(*lat));
	pthread_barrier_t start;
	struct result res;
	double t0;
	int off = 0;

	if (!w || !lat)
		bench_die("out of memory");
	pthread_barrier_init(&start, NULL, (unsigned)clients + 1);
	for (int i = 0; i < clients; i++) {
		w[i].index = i;
		w[i].n = total / clients + (i < total % clients);
		w[i].submit = submit;
		w[i].start = &start;
		w[i].lat_ms = lat + off;
		w[i].ids = submit ? ids + off : NULL;
		off += w[i].n;
		if (pthread_create(&w[i].tid, NULL, worker_run, &w[i]) != 0)
			bench_die("pthread_create failed");
	}
	pthread_barrier_wait(&start);
	t0 = bench_now_s();
	for (int i = 0; i < clients; i++)
		pthread_join(w[i].tid, NULL);
	res.seconds = bench_now_s() - t0;
	pthread_barrier_destroy(&start);
	for (int i = 0; i < clients; i++)
		if (w[i].err[0])
			bench_die("%d clients, %s: %s", clients,
			          submit ? "submissions" : "healthz", w[i].err);
	qsort(lat, (size_t)total, sizeof(*lat), cmp_double);
	res.rate = total / res.seconds;
	res.p50 = percentile(lat, total, 0.50);
	res.p99 = percentile(lat, total, 0.99);
	free(lat);
	free(w);
	return res;
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Every id of the project's job list, in id order, into @out (@max). */
static int list_jobs(char (*out)[ID_MAX], int max)
{
	char path[256], errbuf[CURL_ERROR_SIZE] = "", after[ID_MAX] = "";
	struct curl_slist *h;
	struct bench_buf b = {0};
	CURL *c = bench_handle_new(&b, &h, errbuf, 120L);
	int n = 0;

	for (;;) {
		char url[512];
		json_t *page, *items, *it, *next;
		size_t i;
		long st;

		snprintf(path, sizeof(path),
		         "/v1/projects/%s/jobs?limit=1000%s%s", project_id,
		         after[0] ? "&after=" : "", after);
		snprintf(url, sizeof(url), "%s%s", bench_base_url, path);
		st = bench_request(c, &b, url, NULL);
		if (st != 200)
			bench_die("GET %s: %ld %s", path, st,
			          st < 0 ? errbuf : b.p);
		page = json_loads(b.p, 0, NULL);
		items = json_object_get(page, "items");
		if (!json_is_array(items))
			bench_die("GET %s: no items in %s", path, b.p);
		json_array_foreach (items, i, it) {
			const char *id =
			    json_string_value(json_object_get(it, "id"));

			if (!id || strlen(id) >= ID_MAX || n == max)
				bench_die("GET %s: unexpected item %zu", path,
				          i);
			memcpy(out[n++], id, strlen(id) + 1);
		}
		next = json_object_get(page, "next");
		if (!json_is_string(next)) {
			json_decref(page);
			break;
		}
		snprintf(after, sizeof(after), "%s", json_string_value(next));
		json_decref(page);
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b.p);
	return n;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"cnlabd", required_argument, NULL, 'd'},
	    {"jobs", required_argument, NULL, 'j'},
	    {"clients", required_argument, NULL, 'c'},
	    {NULL, 0, NULL, 0},
	};
	const char *cnlabd = CNL_CNLABD_PATH, *clients_arg = "1,8,64";
	int levels[MAX_LEVELS], nlevels = 0, jobs = 2000, c, total, nlisted;
	char(*ids)[ID_MAX], (*listed)[ID_MAX];

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'd':
			cnlabd = optarg;
			break;
		case 'j':
			jobs = (int)parse_count(optarg, "--jobs", 1000000);
			if (strchr(optarg, ','))
				bench_die("--jobs: one number");
			break;
		case 'c':
			clients_arg = optarg;
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
	for (const char *p = clients_arg; p; p = strchr(p, ',')) {
		if (*p == ',')
			p++;
		if (nlevels == MAX_LEVELS)
			bench_die("--clients: at most %d levels", MAX_LEVELS);
		levels[nlevels++] = (int)parse_count(p, "--clients", 1000);
	}
	for (int i = 0; i < nlevels; i++)
		if (levels[i] > jobs)
			bench_die("--clients %d exceeds --jobs %d", levels[i],
			          jobs);

	atexit(cleanup);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		bench_die("curl_global_init failed");
	start_daemon(cnlabd);

	bench_login(PASSWORD, project_id, sizeof(project_id));

	total = jobs * nlevels;
	ids = calloc((size_t)total, sizeof(*ids));
	listed = calloc((size_t)total + 1, sizeof(*listed));
	if (!ids || !listed)
		bench_die("out of memory");

	printf("cnlabd %s, data directory %s, %d requests per level\n\n",
	       cnlabd, data_dir, jobs);
	printf("| clients | submissions | seconds | submissions/s | p50 ms | "
	       "p99 ms | healthz/s | healthz p50 ms | healthz p99 ms | "
	       "cost |\n");
	printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	fflush(stdout);
	for (int i = 0; i < nlevels; i++) {
		struct result base = run_level(levels[i], jobs, false, NULL);
		struct result sub =
		    run_level(levels[i], jobs, true, ids + (size_t)i * jobs);

		printf("| %d | %d | %.2f | %.0f | %.2f | %.2f | %.0f | %.3f | "
		       "%.3f | %.1fx |\n",
		       levels[i], jobs, sub.seconds, sub.rate, sub.p50, sub.p99,
		       base.rate, base.p50, base.p99, base.rate / sub.rate);
		fflush(stdout);
	}

	/* Ids unique over the whole run, and exactly the project's jobs. */
	qsort(ids, (size_t)total, sizeof(*ids), cmp_id);
	for (int i = 1; i < total; i++)
		if (strcmp(ids[i - 1], ids[i]) == 0)
			bench_die("job id %s acknowledged twice", ids[i]);
	nlisted = list_jobs(listed, total + 1);
	if (nlisted != total)
		bench_die("the project lists %d jobs, %d were acknowledged",
		          nlisted, total);
	for (int i = 0; i < total; i++)
		if (strcmp(ids[i], listed[i]) != 0)
			bench_die("acknowledged job %s is not listed", ids[i]);
	printf("\n%d submissions: all 201, ids unique, all listed\n", total);
	printf("cost: healthz/s over submissions/s at the same "
	       "concurrency\n");
	free(ids);
	free(listed);
	curl_global_cleanup();
	return 0;
}
