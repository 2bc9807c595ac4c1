/*
 * run.c - cnlab run and cnlab jobs logs: submit a job, follow it to its
 * end, stream its output, fetch its artifacts, exit with its code.
 *
 * Shipping the script: nodes share no file system with the user's
 * machine, so a SCRIPT that is a local file travels with the job as an
 * input: streamed first (PUT /v1/projects/{id}/uploads, with its SHA-256;
 * any size up to the server's inputs_max_bytes), then named in the job's
 * "inputs"; the agent writes it under its own name in the job's working
 * folder before it runs (cnl_cli_script_command(): python3 for *.py, sh
 * otherwise).  A SCRIPT
 * that is not a local file is taken as a command to run as is
 * ("cnlab run nvidia-smi -L").
 *
 * Following: one long-lived GET /v1/jobs/{id}/events (Server-Sent
 * Events, read as they arrive through the client's on_data; no timer):
 * each "job" event (the job's document) may print a progress line with
 * the scheduler's estimate ("✓ Queued ... ETA 18s", when the estimate or
 * the reason changed) or "✓ Running on NODE"; each "log" event is an
 * output chunk written to stdout or stderr as the job wrote it, byte for
 * byte ("data", or "data_base64" for bytes that are not UTF-8); "end"
 * carries the final state, sent by cnlabd after all the output.  A
 * stream cut short is opened again after the last chunk written
 * (?after=), so nothing is lost or written twice.  CNLAB_FOLLOW=poll
 * brings back the old loop (the job polled every 250 ms, its output
 * paged by id after each look), kept for bench/run_bench.sh.  Artifacts
 * are streamed into the artifacts folder, in their subfolders, each
 * checked against its SHA-256.  Progress lines go to stderr so that
 * stdout is the job's own.
 *
 * Ctrl-C: on a terminal, asks "cancel the job or detach? [c/d]"; without
 * one (scripts, CI) it detaches, printing how to follow the job later.
 * While following events, a thread of its own waits for the signal
 * (sigwait), so the question comes at once, whatever the stream does.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/label.h"
#include "common/time.h"
#include "common/util.h"
#include "common/base64.h"
#include "common/fs.h"
#include "wire/node.h"

#define POLL_MS       250
#define COMMAND_LIMIT 1024 /* CNL_STORE_COMMAND_MAX in the control plane */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static char *pathf2(const char *a, const char *id, const char *b)
{
	size_t n = strlen(a) + strlen(id) + strlen(b) + 1;
	char *s = cnl_xmalloc(n);

	snprintf(s, n, "%s%s%s", a, id, b);
	return s;
}

/* Write one output chunk to stdout or stderr, as the job wrote it. */
static void write_chunk(const json_t *it)
{
	json_t *text = json_object_get(it, "data");
	const char *b64 = cnl_cli_str(it, "data_base64", NULL);
	FILE *f = strcmp(cnl_cli_str(it, "stream", ""), "stderr") == 0 ? stderr
	                                                               : stdout;
	uint8_t *bytes = NULL;
	size_t len;

	if (json_is_string(text))
		fwrite(json_string_value(text), 1, json_string_length(text), f);
	else if (b64 &&
	         cnl_b64_decode_new(b64, CNL_B64_STD | CNL_B64_PAD,
	                            CNL_B64_INPUT_MAX, &bytes, &len) == 0)
		fwrite(bytes, 1, len, f);
	free(bytes);
	fflush(f);
}

/* Write the output chunks after *@after; advances it.  0 or exit code. */
static int drain_logs(struct cnl_cli *cli, const char *id, char *after,
                      size_t after_len)
{
	for (;;) {
		_cleanup_free_ char *ea = cnl_client_url_escape(after);
		_cleanup_free_ char *base = pathf2("/v1/jobs/", id, "/logs");
		size_t n = strlen(base) + strlen(ea) + 32;
		_cleanup_free_ char *path = cnl_xmalloc(n);
		json_t *o, *items, *it;
		size_t i;
		int code;

		snprintf(path, n, "%s?limit=1000%s%s", base,
		         after[0] ? "&after=" : "", ea);
		if ((code =
		         cnl_cli_call(cli, "GET", path, NULL, NULL, "job", &o)))
			return code;
		items = json_object_get(o, "items");
		json_array_foreach (items, i, it) {
			write_chunk(it);
			snprintf(after, after_len, "%s",
			         cnl_cli_str(it, "id", ""));
		}
		n = json_array_size(items);
		json_decref(o);
		if (n == 0)
			return 0;
	}
}

/* mkdir -p @dir. */
static int make_dirs(const char *dir)
{
	_cleanup_free_ char *d = cnl_xstrdup(dir);

	for (char *p = d + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(d, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(d, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * Open @rel (a path cnl_wire_path_check accepts) beneath the folder @top
 * for writing, creating its folders, following no link on the way: a
 * link planted in the artifacts folder does not lead out.  The file's
 * descriptor, or -errno.
 */
static int create_beneath(int top, const char *rel)
{
	const char *leaf = strrchr(rel, '/');
	int dfd, fd, r;

	if ((r = cnl_mkdirs_beneath(top, rel, 0755, &dfd)) < 0)
		return r;
	fd =
	    openat(dfd, leaf ? leaf + 1 : rel,
	           O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	fd = fd < 0 ? -errno : fd;
	close(dfd);
	return fd;
}

/* Download every artifact of @id into @dir, streamed, in their
 * subfolders, each checked against its SHA-256; 0 or an exit code. */
static int fetch_artifacts(struct cnl_cli *cli, const char *id, const char *dir)
{
	_cleanup_free_ char *path =
	    pathf2("/v1/jobs/", id, "/artifacts?limit=1000");
	char why[128];
	json_t *o, *it;
	size_t i, got = 0;
	int code, top;

	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "job", &o)))
		return code;
	if (json_array_size(json_object_get(o, "items")) == 0) {
		json_decref(o);
		return 0;
	}
	if (make_dirs(dir) < 0 ||
	    (top = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		json_decref(o);
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot create %s: %s", dir,
		                    strerror(errno));
	}
	json_array_foreach (json_object_get(o, "items"), i, it) {
		const char *name = cnl_cli_str(it, "path", "");
		const char *sha = cnl_cli_str(it, "sha256", "");
		_cleanup_free_ char *en = cnl_client_url_escape(name);
		_cleanup_free_ char *p2 =
		    cnl_cli_pathf("/v1/jobs/%s/artifact?path=%s", id, en);
		struct cnl_client_reply r;
		char what[CNL_WIRE_PATH_MAX + 16];
		int fd;

		if (cnl_wire_path_check(name, why, sizeof(why)) < 0) {
			fprintf(stderr,
			        "cnlab: skipping artifact with an unsafe "
			        "name (%s)\n",
			        why);
			continue;
		}
		if ((fd = create_beneath(top, name)) < 0) {
			close(top);
			json_decref(o);
			return cnl_cli_fail(CNL_EXIT_ERROR,
			                    "cannot write %s/%s: %s", dir, name,
			                    strerror(-fd));
		}
		snprintf(what, sizeof(what), "artifact %s", name);
		code = cnl_cli_stream(cli,
		                      &(struct cnl_client_request){
		                          .method = "GET",
		                          .path = p2,
		                          .download = true,
		                          .download_fd = fd,
		                      },
		                      what, &r);
		close(fd);
		if (!code &&
		    (!r.downloaded || strcmp(r.download_sha256, sha))) {
			cnl_client_reply_done(&r);
			code = cnl_cli_fail(CNL_EXIT_ERROR,
			                    "artifact %s arrived damaged (its "
			                    "SHA-256 differs)",
			                    name);
		}
		if (code) {
			close(top);
			json_decref(o);
			return code;
		}
		cnl_client_reply_done(&r);
		got++;
	}
	close(top);
	json_decref(o);
	fprintf(stderr, "✓ Artifacts: %zu file%s in %s/\n", got,
	        got == 1 ? "" : "s", dir);
	return 0;
}

static bool is_final(const char *state)
{
	return strcmp(state, "succeeded") == 0 ||
	       strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0;
}

/*
 * Print a waiting line when the reason or the estimate changed.  A job
 * holding a reservation says so as the seeds do ("Job queued. Scheduler
 * reserved 1×H100-50pct on node n1." / "ETA to start: 12 min."), from the
 * scheduler's own reservation; otherwise "✓ Queued... ETA ... (reason)".
 * @st is the job's live status, NULL when it has none.
 */
static void progress(const struct cnl_wire_status *st, char *last,
                     size_t last_len)
{
	const char *reason = st && st->pending ? st->reason : "waiting";
	const struct cnl_wire_reservation *resv =
	    st && st->has_reservation ? &st->reservation : NULL;
	char line[512], eta[160], t[CNL_TIME_RFC3339_MAX];

	snprintf(line, sizeof(line), "%s|%s|%s", reason,
	         cnl_cli_time(st && st->pending ? st->estimated_start_ms : 0, t,
	                      sizeof(t), "-"),
	         resv ? resv->node : "-");
	if (strcmp(line, last) == 0)
		return;
	snprintf(last, last_len, "%s", line);
	if (resv) {
		const char *cl = resv->cluster[0] ? resv->cluster : NULL;
		char slice[64];

		cnl_cli_slice_label(resv->shape, slice, sizeof(slice));
		cnl_cli_eta(st, "", eta, sizeof(eta));
		fprintf(stderr,
		        "Job queued. Scheduler reserved %s on %s%s%s%s%s.\n"
		        "ETA to start: %s.\n",
		        slice, cl ? "cluster " : "node ", cl ? cl : "",
		        cl ? " (node " : resv->node, cl ? resv->node : "",
		        cl ? ")" : "", eta);
		return;
	}
	cnl_cli_eta(st, "ETA ", eta, sizeof(eta));
	fprintf(stderr, "✓ Queued... %s (%s)\n", eta, reason);
}

/* Ctrl-C: ask, or detach.  1 to detach, 0 to go on (cancel asked). */
static int on_interrupt(struct cnl_cli *cli, const char *id, bool *cancelled)
{
	char line[16] = "";

	interrupted = 0;
	if (isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
		fputs("\ncancel the job or detach? [c/d] ", stderr);
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 'd';
	}
	if (line[0] == 'c' || line[0] == 'C') {
		_cleanup_free_ char *path = pathf2("/v1/jobs/", id, "/cancel");
		json_t *o;

		if (cnl_cli_call(cli, "POST", path, NULL, NULL, "job", &o) ==
		    0) {
			json_decref(o);
			fprintf(stderr, "✓ Cancelling %s\n", id);
		}
		*cancelled = true;
		return 0;
	}
	fprintf(stderr,
	        "\ndetached: job %s keeps going; follow it with: cnlab jobs "
	        "logs --follow %s\n",
	        id, id);
	return 1;
}

static int gang_wait(struct cnl_cli *cli, const struct cnl_wire_job_gang *g,
                     const char *dir, int code);

/* GET job @path, decoded into *@ret; 0 or an exit code. */
static int get_job(struct cnl_cli *cli, const char *path,
                   struct cnl_wire_job *ret)
{
	json_t *o;
	int code;

	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "job", &o)))
		return code;
	code = cnl_cli_read_job(o, ret);
	json_decref(o);
	return code;
}

/* The exit code a job's end stands for (cnlab run's own rule). */
static int end_code(const struct cnl_wire_job *o)
{
	int ec = o->exit_code;

	if (strcmp(o->state, "succeeded") == 0)
		return 0;
	if (strcmp(o->state, "cancelled") == 0)
		return 130;
	return ec > 0 && ec < 256 ? ec : 1;
}

/* The old way of following, kept for comparison (bench/run_bench.sh):
 * CNLAB_FOLLOW=poll polls the job every POLL_MS. */
static bool poll_mode(void)
{
	const char *v = getenv("CNLAB_FOLLOW");

	return v && strcmp(v, "poll") == 0;
}

/* What a job's document says to a user of cnlab run: the progress line
 * while it waits, where it runs once it does. */
static void show_job(const struct cnl_wire_job *o, char *last, size_t last_len,
                     bool *announced)
{
	const struct cnl_wire_status *st = o->has_status ? &o->status : NULL;

	if (strcmp(o->state, "pending") == 0)
		progress(st, last, last_len);
	if (strcmp(o->state, "running") == 0 && !*announced && st &&
	    st->node[0]) {
		fprintf(stderr, "✓ Running on %s\n", st->node);
		*announced = true;
	}
	/* A job quicker than an update: where it ran still says. */
	if (is_final(o->state) && !*announced && o->has_placement &&
	    o->placement.node[0]) {
		fprintf(stderr, "✓ Running on %s\n", o->placement.node);
		*announced = true;
	}
}

/*
 * Following by events: GET /v1/jobs/{id}/events, Server-Sent Events
 * read as they arrive (the client's on_data), no timer.  "job" events
 * carry the job's document (progress lines), "log" events its output
 * with the chunk's id as the event id, "end" the final document.  A
 * stream cut short (a dropped connection, cnlabd restarting) is opened
 * again after the last chunk written (?after=), so no output is lost or
 * written twice; only a stream that fails without bringing anything new
 * waits before trying again, at most EV_TRIES times.
 */
#define EV_TRIES     8
#define EV_LINE_MAX  ((size_t)16 << 20)
#define EV_IDLE_MIN  (45 * 1000) /* the server's keep-alive is 15 s */
#define EV_STEADY_NS (5LL * 1000000000)

struct evs {
	struct cnl_cli *cli;
	const char *id;
	bool run;  /* progress lines */
	bool logs; /* write the output */
	char after[160];
	/* The event being read. */
	char *line;
	size_t line_len;
	char event[16];
	char *data;
	size_t data_len;
	char evid[160];
	bool fresh;    /* something new came on this connection */
	bool ended;    /* the "end" event came */
	bool have_job; /* @job holds the last document */
	struct cnl_wire_job job;
	char last[512]; /* the last progress line's key */
	bool announced;
	int code; /* an event that did not read: an exit code */
};

static void evs_done(struct evs *s)
{
	free(s->line);
	free(s->data);
	if (s->have_job)
		cnl_wire_job_done(&s->job);
	s->line = s->data = NULL;
	s->have_job = false;
}

/* One whole event. */
static void ev_dispatch(struct evs *s)
{
	json_t *o =
	    s->data_len ? json_loadb(s->data, s->data_len, 0, NULL) : NULL;
	struct cnl_wire_job j;

	if (strcmp(s->event, "log") == 0 && json_is_object(o)) {
		if (s->logs)
			write_chunk(o);
		snprintf(s->after, sizeof(s->after), "%s",
		         s->evid[0] ? s->evid : cnl_cli_str(o, "id", ""));
		s->fresh = true;
	} else if (strcmp(s->event, "job") == 0 ||
	           strcmp(s->event, "end") == 0) {
		if (!o || (s->code = cnl_cli_read_job(o, &j))) {
			if (!o)
				s->code = cnl_cli_fail(CNL_EXIT_ERROR,
				                       "job %s: an event that "
				                       "is not JSON",
				                       s->id);
			json_decref(o);
			return;
		}
		if (!s->have_job || strcmp(j.state, s->job.state) != 0)
			s->fresh = true;
		if (s->have_job)
			cnl_wire_job_done(&s->job);
		s->job = j;
		s->have_job = true;
		if (s->run)
			show_job(&s->job, s->last, sizeof(s->last),
			         &s->announced);
		if (s->event[0] == 'e')
			s->ended = s->fresh = true;
	}
	json_decref(o);
}

/* One line of the stream (without its end). */
static void ev_line(struct evs *s, char *l, size_t n)
{
	char *v;

	if (n && l[n - 1] == '\r')
		l[--n] = '\0';
	if (n == 0) {
		if (s->event[0] || s->data_len)
			ev_dispatch(s);
		s->event[0] = s->evid[0] = '\0';
		s->data_len = 0;
		return;
	}
	if (l[0] == ':') /* a comment: the keep-alive */
		return;
	if ((v = strchr(l, ':'))) {
		*v++ = '\0';
		if (*v == ' ')
			v++;
	} else {
		v = l + n;
	}
	if (strcmp(l, "event") == 0) {
		snprintf(s->event, sizeof(s->event), "%s", v);
	} else if (strcmp(l, "id") == 0) {
		snprintf(s->evid, sizeof(s->evid), "%s", v);
	} else if (strcmp(l, "data") == 0) {
		size_t k = strlen(v);

		s->data = cnl_xrealloc(s->data, s->data_len + k + 2);
		if (s->data_len)
			s->data[s->data_len++] = '\n';
		memcpy(s->data + s->data_len, v, k);
		s->data_len += k;
		s->data[s->data_len] = '\0';
	}
}

/* The client's on_data: split what came into lines. */
static int ev_data(void *ud, const char *buf, size_t len)
{
	struct evs *s = ud;
	size_t start = 0;

	if (s->line_len + len > EV_LINE_MAX) {
		s->code = cnl_cli_fail(CNL_EXIT_ERROR,
		                       "job %s: an event over %zu bytes", s->id,
		                       EV_LINE_MAX);
		return 1;
	}
	s->line = cnl_xrealloc(s->line, s->line_len + len + 1);
	memcpy(s->line + s->line_len, buf, len);
	s->line_len += len;
	for (size_t i = 0; i < s->line_len && !s->code && !s->ended; i++) {
		if (s->line[i] != '\n')
			continue;
		s->line[i] = '\0';
		ev_line(s, s->line + start, i - start);
		start = i + 1;
	}
	memmove(s->line, s->line + start, s->line_len - start);
	s->line_len -= start;
	/* The end: done, without waiting for the reply's last chunk. */
	return s->code || s->ended ? 1 : 0;
}

/* Follow job s->id's events to its end (s->job: its final document). 0 or
 * an exit code. */
static int stream_job(struct evs *s)
{
	struct cnl_client *cl;
	long idle = s->cli->read_timeout_ms == 0 ? -1
	            : s->cli->read_timeout_ms < EV_IDLE_MIN
	                ? EV_IDLE_MIN
	                : (long)s->cli->read_timeout_ms;
	int fails = 0;

	if (!s->cli->token)
		return cnl_cli_fail(
		    CNL_EXIT_AUTH, "not logged in: run cnlab login (server %s)",
		    s->cli->server);
	if (!(cl = cnl_cli_client(s->cli)))
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot start libcurl");
	for (;;) {
		_cleanup_free_ char *ea = cnl_client_url_escape(s->after);
		_cleanup_free_ char *path =
		    cnl_cli_pathf("/v1/jobs/%s/events%s%s", s->id,
		                  s->after[0] ? "?after=" : "", ea);
		struct cnl_client_reply r;
		int64_t t0 = cnl_time_mono_ns();
		int rc, code;

		s->line_len = s->data_len = 0;
		s->event[0] = s->evid[0] = '\0';
		s->fresh = false;
		rc = cnl_client_request(cl,
		                        &(struct cnl_client_request){
		                            .method = "GET",
		                            .path = path,
		                            .idle_timeout_ms = idle,
		                            .on_data = ev_data,
		                            .on_data_ud = s,
		                        },
		                        &r);
		if (s->code) {
			cnl_client_reply_done(&r);
			return s->code;
		}
		if (rc == 0 && (r.status < 200 || r.status > 299)) {
			code = cnl_cli_reply_error(s->cli, &r, "job");
			cnl_client_reply_done(&r);
			return code;
		}
		if ((rc == 0 || rc == -ECANCELED) && s->ended) {
			cnl_client_reply_done(&r);
			return 0;
		}
		/* Cut short: again, after the last chunk written. */
		if (s->fresh || cnl_time_mono_ns() - t0 >= EV_STEADY_NS)
			fails = 0;
		if (++fails > EV_TRIES) {
			code = rc < 0
			           ? cnl_cli_unreachable(s->cli, &r, NULL)
			           : cnl_cli_fail(CNL_EXIT_ERROR,
			                          "the events of job %s keep "
			                          "ending early",
			                          s->id);
			cnl_client_reply_done(&r);
			return code;
		}
		cnl_client_reply_done(&r);
		if (fails > 1)
			usleep((useconds_t)(50000U << (fails < 7 ? fails : 7)));
	}
}

/*
 * Ctrl-C while following by events: SIGINT is blocked in every thread
 * but one that waits for it (sigwait) and asks "cancel or detach?" as
 * on_interrupt() does, with a client of its own, while the stream goes
 * on: a cancel then shows as the job's end; a detach ends the process.
 */
struct sigwatch {
	struct cnl_cli *cli;
	const char *id;
	pthread_t t;
	bool on;
	atomic_bool stop; /* watch_stop(): the next SIGINT ends the watcher */
};

static int on_interrupt(struct cnl_cli *cli, const char *id, bool *cancelled);

static void *watch(void *arg)
{
	struct sigwatch *w = arg;
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	for (;;) {
		struct cnl_cli c2 = *w->cli;
		bool cancelled = false;
		int detach;

		if (sigwait(&set, &sig) != 0)
			continue;
		if (atomic_load(&w->stop))
			break;
		c2.client = NULL;
		detach = on_interrupt(&c2, w->id, &cancelled);
		cnl_client_free(c2.client);
		if (detach) {
			fflush(stdout);
			fflush(stderr);
			_exit(0);
		}
	}
	return NULL;
}

/* Block SIGINT (the caller's thread first, so that no Ctrl-C between
 * the submission and the watcher is lost). */
static void sigint_block(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Take SIGINT back: a Ctrl-C that came meanwhile only sets the flag. */
static void sigint_flag(void)
{
	struct sigaction sa = {0};
	sigset_t set;

	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void watch_start(struct sigwatch *w, struct cnl_cli *cli, const char *id)
{
	sigint_block();
	w->cli = cli;
	w->id = id;
	atomic_store(&w->stop, false);
	w->on = pthread_create(&w->t, NULL, watch, w) == 0;
	if (!w->on) { /* no watcher: Ctrl-C ends cnlab as it would */
		signal(SIGINT, SIG_DFL);
		sigint_flag();
		signal(SIGINT, SIG_DFL);
	}
}

static void watch_stop(struct sigwatch *w)
{
	if (w->on) {
		/* Not pthread_cancel: a thread cancelled in sigwait is not torn
		 * down cleanly under the sanitizers.  A question being asked is
		 * answered first, as before. */
		atomic_store(&w->stop, true);
		pthread_kill(w->t, SIGINT);
		pthread_join(w->t, NULL);
		w->on = false;
		sigint_flag();
	}
}

/* How a followed job ended, for cnlab run: the line, the artifacts, the
 * exit code. */
static int finish(struct cnl_cli *cli, const char *id,
                  const struct cnl_wire_job *o, const char *dir)
{
	int code = end_code(o), c2;

	if (strcmp(o->state, "succeeded") == 0)
		fprintf(stderr, "✓ Job %s succeeded\n", id);
	else if (strcmp(o->state, "cancelled") == 0)
		fprintf(stderr, "✗ Job %s was cancelled\n", id);
	else
		fprintf(stderr, "✗ Job %s failed (exit code %d)%s%s\n", id,
		        o->exit_code, o->message[0] ? ": " : "", o->message);
	c2 = fetch_artifacts(cli, id, dir);
	return c2 && code == 0 ? c2 : code;
}

/* The old follow loop (CNLAB_FOLLOW=poll): the job polled every
 * POLL_MS, its output paged after each look.  Its final document in
 * *@ret.  0 or an exit code. */
static int follow_poll(struct cnl_cli *cli, const char *id, bool run,
                       struct cnl_wire_job *ret)
{
	_cleanup_free_ char *path = pathf2("/v1/jobs/", id, "");
	char after[160] = "", last[512] = "";
	bool announced = false, cancelled = false;
	struct cnl_wire_job o;
	int code;

	if (run)
		sigint_flag();
	for (;;) {
		if (run && interrupted && on_interrupt(cli, id, &cancelled))
			return -1;
		if ((code = get_job(cli, path, &o)))
			return code;
		if (run)
			show_job(&o, last, sizeof(last), &announced);
		if ((code = drain_logs(cli, id, after, sizeof(after)))) {
			cnl_wire_job_done(&o);
			return code;
		}
		if (is_final(o.state))
			break;
		cnl_wire_job_done(&o);
		usleep(POLL_MS * 1000);
	}
	*ret = o;
	return 0;
}

/*
 * Follow job @id until it ends.  @run: progress lines, Ctrl-C handling,
 * artifacts into @dir and the job's exit code; else just the output.
 * @gang: the job leads a gang (its members by rank), whose other members
 * are waited for once it ended (gang_wait); NULL for a job alone.
 */
static int follow(struct cnl_cli *cli, const char *id, bool run,
                  const char *dir, const struct cnl_wire_job_gang *gang)
{
	struct evs s = {.cli = cli, .id = id, .run = run, .logs = true};
	struct sigwatch w = {0};
	struct cnl_wire_job o;
	int code;

	if (poll_mode()) {
		if ((code = follow_poll(cli, id, run, &o)))
			return code < 0 ? 0 : code; /* < 0: detached */
	} else {
		if (run)
			watch_start(&w, cli, id);
		if ((code = stream_job(&s))) {
			watch_stop(&w);
			evs_done(&s);
			return code;
		}
		o = s.job;
		s.have_job = false;
		evs_done(&s);
	}
	if (!run) {
		cnl_wire_job_done(&o);
		return 0;
	}
	code = finish(cli, id, &o, dir);
	cnl_wire_job_done(&o);
	if (gang && gang->n_members > 1)
		code = gang_wait(cli, gang, dir, code);
	watch_stop(&w);
	return code;
}

/* Wait for job @id's end, its final document into *@ret, its output not
 * written; 0, -1 when detached (Ctrl-C, poll mode) or an exit code. */
static int wait_end(struct cnl_cli *cli, const char *id,
                    struct cnl_wire_job *ret)
{
	struct evs s = {.cli = cli, .id = id};
	_cleanup_free_ char *path = NULL;
	bool cancelled = false;
	int c;

	if (!poll_mode()) {
		if ((c = stream_job(&s)) == 0) {
			*ret = s.job;
			s.have_job = false;
		}
		evs_done(&s);
		return c;
	}
	path = pathf2("/v1/jobs/", id, "");
	for (;;) {
		if (interrupted && on_interrupt(cli, id, &cancelled))
			return -1;
		if ((c = get_job(cli, path, ret)))
			return c;
		if (is_final(ret->state))
			return 0;
		cnl_wire_job_done(ret);
		usleep(POLL_MS * 1000);
	}
}

/*
 * The rest of a gang once its leader (rank 0), whose output was streamed,
 * has ended with exit code @code: wait until every other member has
 * ended too, fetch its artifacts into @dir/rank-K, and return the gang's
 * code: the leader's when not 0, else the first other member's (by rank)
 * that is not 0, else 0.
 */
static int gang_wait(struct cnl_cli *cli, const struct cnl_wire_job_gang *g,
                     const char *dir, int code)
{
	int n = g->n_members;
	int first = 0;

	fprintf(stderr, "✓ Waiting for the other %d member%s of the gang\n",
	        n - 1, n == 2 ? "" : "s");
	for (int k = 1; k < n; k++) {
		const char *id = g->members[k];
		char sub[32];
		struct cnl_wire_job o;
		int c;

		if ((c = wait_end(cli, id, &o)))
			return c < 0 ? code : c;
		c = end_code(&o);
		fprintf(stderr, "%s Rank %d (%s) %s", c ? "✗" : "✓", k, id,
		        o.state);
		if (c && strcmp(o.state, "failed") == 0)
			fprintf(stderr, " (exit code %d)", c);
		fputc('\n', stderr);
		cnl_wire_job_done(&o);
		if (c && !first)
			first = c;
		snprintf(sub, sizeof(sub), "/rank-%d", k);
		{
			_cleanup_free_ char *d = pathf2(dir, sub, "");

			fetch_artifacts(cli, id, d);
		}
	}
	return code ? code : first;
}

int cnl_cli_cmd_jobs_logs(struct cnl_cli *cli)
{
	char after[160] = "";

	if (cnl_cli_flag(cli, "follow"))
		return follow(cli, cli->args.pos[0], false, NULL, NULL);
	return drain_logs(cli, cli->args.pos[0], after, sizeof(after));
}

/* Random hex for the Idempotency-Key of one submission. */
static void idem_key(char *buf, size_t len)
{
	unsigned char b[16] = {0};
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	size_t o = 0;

	if (fd >= 0) {
		if (read(fd, b, sizeof(b)) != (ssize_t)sizeof(b))
			memset(b, 0, sizeof(b));
		close(fd);
	}
	if (b[0] == 0 && b[1] == 0) {
		int64_t t = cnl_time_mono_ns() ^ (int64_t)getpid();

		memcpy(b, &t, sizeof(t));
	}
	o = (size_t)snprintf(buf, len, "run-");
	for (size_t i = 0; i < sizeof(b) && o + 3 <= len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%02x", b[i]);
}

/* Whether @name is a profile the server knows. */
static bool is_profile(struct cnl_cli *cli, const char *name)
{
	json_t *o, *it;
	size_t i;
	bool yes = false;

	if (cnl_cli_call(cli, "GET", "/v1/profiles?limit=1000", NULL, NULL,
	                 NULL, &o))
		return false;
	json_array_foreach (json_object_get(o, "items"), i, it)
		yes |= strcmp(cnl_cli_str(it, "name", ""), name) == 0;
	json_decref(o);
	return yes;
}

/*
 * The job's command from SCRIPT and its arguments; a local SCRIPT is
 * named in *@ret_script, to go as an input under the name *@ret_base.
 */
static int build_command(struct cnl_cli *cli, char *buf, size_t len,
                         const char **ret_script, const char **ret_base)
{
	const char *script = cli->args.pos[0], *base;
	struct stat st;
	int r;

	*ret_script = NULL;
	if (stat(script, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (cnl_cli_plain_command(cli->args.pos, cli->args.npos, buf,
		                          len) < 0)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "the command is too long (the "
			                    "platform keeps %d bytes)",
			                    COMMAND_LIMIT - 1);
		return 0;
	}
	r = cnl_cli_script_command(script, cli->args.pos + 1,
	                           cli->args.npos - 1, buf, len, &base);
	if (r == -EINVAL)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "%s: not a usable file name", script);
	if (r < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "the arguments are too long (the platform "
		                    "keeps %d bytes of command)",
		                    COMMAND_LIMIT - 1);
	*ret_script = script;
	*ret_base = base;
	return 0;
}

/*
 * Stream the local file @file to project @pid as an input named @name,
 * with its SHA-256; its upload id into @ret_id.  0 or an exit code.
 */
static int upload_input(struct cnl_cli *cli, const char *pid, const char *file,
                        const char *name, char *ret_id, size_t id_len)
{
	_cleanup_free_ char *en = cnl_client_url_escape(name);
	_cleanup_free_ char *path = NULL;
	struct cnl_client_reply r;
	char sha[65], what[300];
	struct stat st;
	int fd, code;

	if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE, "cannot read %s: %s", file,
		                    strerror(errno));
	if (cnl_client_file_sha256(fd, (uint64_t)st.st_size, sha) < 0) {
		close(fd);
		return cnl_cli_fail(CNL_EXIT_USAGE, "cannot read %s", file);
	}
	path = cnl_cli_pathf("/v1/projects/%s/uploads?path=%s", pid, en);
	snprintf(what, sizeof(what), "input %s", file);
	code = cnl_cli_stream(cli,
	                      &(struct cnl_client_request){
	                          .method = "PUT",
	                          .path = path,
	                          .upload = true,
	                          .upload_fd = fd,
	                          .upload_size = (uint64_t)st.st_size,
	                          .sha256 = sha,
	                      },
	                      what, &r);
	close(fd);
	if (code)
		return code;
	snprintf(ret_id, id_len, "%s", cnl_cli_str(r.json, "id", ""));
	cnl_client_reply_done(&r);
	if (!ret_id[0])
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "input %s: the server gave no upload id",
		                    file);
	return 0;
}

/*
 * The job fields of the flags beyond the shape into *@ret (a new object):
 * gpu_types, dataset, cluster, nodelist, exclude, prefer, avoid,
 * nodes, preemptible, cpu_milli, mem_mib.  0, or exit code 2 with a message
 * naming the flag.
 */
static int job_fields(struct cnl_cli *cli, json_t **ret)
{
	static const char *const lists[][3] = {
	    {"gpu-type", "gpu_types",
	     "--gpu-type: want 1..16 comma-separated GPU types or families, "
	     "e.g. h100,a100"},
	    {"nodelist", "nodelist",
	     "--nodelist: want 1..16 comma-separated node names (cnlab node "
	     "list)"},
	    {"exclude", "exclude",
	     "--exclude: want 1..16 comma-separated node names (cnlab node "
	     "list)"},
	    {"prefer", "prefer",
	     "--prefer: want 1..16 comma-separated node names (cnlab node "
	     "list)"},
	    {"avoid", "avoid",
	     "--avoid: want 1..16 comma-separated node names (cnlab node "
	     "list)"}};
	const char *dataset = cnl_cli_flag(cli, "dataset");
	const char *nodes = cnl_cli_flag(cli, "nodes");
	const char *cpu = cnl_cli_flag(cli, "cpu");
	const char *mem = cnl_cli_flag(cli, "memory");
	json_t *o = json_object();
	int64_t v;
	char *end;

	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		const char *f = cnl_cli_flag(cli, lists[i][0]);
		json_t *a;

		if (!f)
			continue;
		if (!(a = cnl_cli_comma_list(f, i == 0 ? 31 : 63, 16))) {
			json_decref(o);
			return cnl_cli_fail(CNL_EXIT_USAGE, "%s", lists[i][2]);
		}
		json_object_set_new(o, lists[i][1], a);
	}
	if (dataset && !cnl_label_valid(dataset)) {
		json_decref(o);
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "--dataset: want a name of 1..63 characters "
		    "of A-Z a-z 0-9 . _ -, not starting with . "
		    "or -");
	}
	if (dataset)
		json_object_set_new(o, "dataset", json_string(dataset));
	if (cnl_cli_flag(cli, "cluster"))
		json_object_set_new(o, "cluster",
		                    json_string(cnl_cli_flag(cli, "cluster")));
	if (cnl_cli_flag(cli, "image"))
		json_object_set_new(o, "image",
		                    json_string(cnl_cli_flag(cli, "image")));
	if (nodes) {
		errno = 0;
		v = strtoll(nodes, &end, 10);
		if (errno || end == nodes || *end || v < 1 || v > 64) {
			json_decref(o);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--nodes: want a number of nodes in "
			    "1..64");
		}
		json_object_set_new(o, "nodes", json_integer(v));
	}
	if (cnl_cli_flag(cli, "no-preempt"))
		json_object_set_new(o, "preemptible", json_false());
	if (cpu) {
		if (cnl_cli_parse_cpu(cpu, &v) < 0) {
			json_decref(o);
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--cpu: want cores (2, 0.5) or "
			                    "milli-cores (500m), at most 1024");
		}
		json_object_set_new(o, "cpu_milli", json_integer(v));
	}
	if (mem) {
		if (cnl_cli_parse_memory(mem, &v) < 0) {
			json_decref(o);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--memory: want a size such as 8Gi, "
			    "512Mi or 8g, or a number of MiB");
		}
		json_object_set_new(o, "mem_mib", json_integer(v));
	}
	*ret = o;
	return 0;
}

int cnl_cli_cmd_run(struct cnl_cli *cli)
{
	const char *gpu = cnl_cli_flag(cli, "gpu");
	const char *profile = cnl_cli_flag(cli, "profile");
	const char *prio = cnl_cli_flag(cli, "priority");
	const char *deadline = cnl_cli_flag(cli, "deadline");
	const char *runtime = cnl_cli_flag(cli, "runtime");
	const char *dir = cnl_cli_flag(cli, "artifacts");
	const char *types = cnl_cli_flag(cli, "gpu-type");
	char command[COMMAND_LIMIT], pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	char key[64], dl[CNL_TIME_RFC3339_MAX];
	_cleanup_free_ char *path = NULL, *id = NULL, *defdir = NULL;
	_cleanup_free_ struct cnl_wire_job_gang *gang = NULL;
	struct cnl_wire_job job;
	int64_t t;
	json_t *body, *o, *extra = NULL;
	const char *script = NULL, *base = NULL;
	char upload[CNL_CLI_ID_MAX];
	int code;

	/* --gpu-type alone: one whole GPU of any of those types. */
	if (!gpu && !profile && types)
		gpu = "any";
	if (!gpu == !profile)
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "give --gpu SHAPE (e.g. h100-25) or --profile "
		    "NAME (see cnlab profiles list)");
	if (prio && strcmp(prio, "low") && strcmp(prio, "normal") &&
	    strcmp(prio, "high") && strcmp(prio, "critical"))
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--priority must be low, normal, high or "
		                    "critical");
	if ((code = job_fields(cli, &extra)))
		return code;
	if ((code = build_command(cli, command, sizeof(command), &script,
	                          &base))) {
		json_decref(extra);
		return code;
	}
	body = json_pack("{s:s}", "command", command);
	json_object_update(body, extra);
	json_decref(extra);
	if (deadline) {
		if (cnl_time_parse_rfc3339(deadline, &t) < 0 ||
		    cnl_time_format_rfc3339(t, dl, sizeof(dl)) < 0) {
			json_decref(body);
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--deadline: not an ISO 8601 time "
			                    "(try 2026-04-30T17:00 or "
			                    "2026-04-30T17:00:00+09:00)");
		}
		json_object_set_new(body, "deadline", json_string(dl));
	}
	if (runtime) {
		if (cnl_duration_parse(runtime, &t) < 0) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--runtime: not a duration (try 2h)");
		}
		json_object_set_new(body, "runtime_s",
		                    json_integer((t + 999) / 1000));
	}
	if (prio)
		json_object_set_new(body, "priority", json_string(prio));
	if ((code = cnl_cli_secret_refs(cli, body)) ||
	    (code = cnl_cli_project(cli, NULL, pid, pname))) {
		json_decref(body);
		return code;
	}
	/* --gpu also takes a profile name: that is what completion offers. */
	if (gpu && is_profile(cli, gpu)) {
		profile = gpu;
		gpu = NULL;
	}
	json_object_set_new(body, gpu ? "gpu" : "profile",
	                    json_string(gpu ? gpu : profile));
	if (script) {
		if ((code = upload_input(cli, pid, script, base, upload,
		                         sizeof(upload)))) {
			json_decref(body);
			return code;
		}
		json_object_set_new(body, "inputs", json_pack("[s]", upload));
	}
	idem_key(key, sizeof(key));
	path = pathf2("/v1/projects/", pid, "/jobs");
	code = cnl_cli_call(cli, "POST", path, body, key, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if ((code = cnl_cli_read_job(o, &job))) {
		json_decref(o);
		return code;
	}
	id = cnl_xstrdup(job.id);
	/* A Ctrl-C from now on waits for the follower's watcher (or flag). */
	if (!cnl_cli_flag(cli, "detach"))
		sigint_block();
	if (cli->json)
		cnl_cli_print_json(o);
	else
		fprintf(stderr, "✓ Queued %s on %s (priority %s, project %s)\n",
		        id, job.gpu, cnl_wire_priority_name(job.priority),
		        pname);
	json_decref(o);
	/* Which estimate the deadline was checked with, as the server
	 * says: only the start when no --runtime was given. */
	if (!cli->json && job.has_deadline_check)
		fprintf(stderr, "✓ Deadline can be met: %s\n",
		        job.deadline_check.text);
	/* A gang's leader keeps its members, to wait for them too. */
	gang = job.gang;
	job.gang = NULL;
	cnl_wire_job_done(&job);
	if (gang && !gang->has_members)
		gang->n_members = 0;
	if (!cli->json && gang && gang->n_members > 1)
		fprintf(stderr,
		        "✓ A gang of %d, one node each; rank 0 (%s) is shown\n",
		        gang->n_members, id);
	if (cnl_cli_flag(cli, "detach")) {
		if (!cli->json) {
			printf("%s\n", id);
			fprintf(stderr,
			        "follow it with: cnlab jobs logs --follow %s\n",
			        id);
		}
		return 0;
	}
	if (!dir) {
		defdir = pathf2("artifacts/", id, "");
		dir = defdir;
	}
	return follow(cli, id, true, dir, gang);
}
