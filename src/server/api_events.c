/*
 * api_events.c - GET /v1/jobs/{job}/events: one job's life over one
 * long-lived response, as Server-Sent Events (text/event-stream, chunked).
 *
 * What comes, in order:
 *
 *   event: job     data: the job as GET /v1/jobs/{job} shows it; sent
 *                  first, then whenever that document changes (state,
 *                  node, the pending reason or estimate)
 *   id: <log id>   (on each output chunk: the resume point)
 *   event: log     data: one output chunk as GET .../logs lists it
 *                  ({"id", "stream", "data" or "data_base64", "at"})
 *   event: end     data: the job in its final state; the response ends
 *   : keep-alive   a comment when nothing was sent for KEEPALIVE_MS
 *
 * Resuming: a client that lost the connection asks again with the last
 * id it saw, as the header Last-Event-ID or the query ?after=; the
 * output resumes after that chunk (none repeated, none lost) and the job
 * document comes again first.  The end comes only once every chunk
 * stored for the job was sent, and the job's state is read before its
 * output each time, so a final state seen means the output that follows
 * it is the whole of it (the agent reports the exit after the output).
 *
 * Waking: nothing here runs on a timer but the keep-alive.  Each job that
 * streams follow has a wait list (struct cnl_api_ev_watch: a condition
 * variable under the big lock and a sequence), found by the job id's hash
 * in api->ev_watch.  cnl_api_events_note() is called (lock held) when a
 * job's state or run record is written (the controller's changed hook) or
 * an output chunk is stored: it bumps that job's sequence and wakes only
 * that job's streams; the streams of other jobs sleep on.
 * cnl_api_events_tick(), after each controller tick, wakes the jobs whose
 * streams last saw them pending (their estimate moves).  Every wake-up
 * of a stream counts in cnlab_event_stream_wakeups_total.
 *
 * Durable only: under group commit (commit.h) a chunk or a state is
 * visible in the store as soon as it is committed, before it is synced.
 * A stream sends nothing before the commits it read are durable: after
 * each pass it takes the commit count (cnl_commit_mark()), lets the lock
 * go and waits for it (cnl_commit_wait()), as any answer does.  Should
 * the sync fail, the stream ends instead of sending: the client resumes
 * from the last id it was sent, which was durable.
 *
 * Authorization is the route's (PROJECT_VIEW of the job's project, as
 * GET of the job), checked when the stream opens and again, on the store,
 * before anything more is queued whenever an authentication-relevant
 * change was answered since (logout, user disable, membership, token
 * revoke: cnl_api_dash_auth_gen()) or REAUTH_MS passed (a session or API
 * token that expired): a revoked session or token, a disabled user or a
 * removed member gets nothing more, and the stream ends.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/time.h"
#include "common/util.h"
#include "server/api-internal.h"

/* A comment line goes out when the stream was silent this long. */
#define KEEPALIVE_MS (15 * 1000)
/* The credential is asked again at least this often. */
#define REAUTH_MS (15 * 1000)
/* Output chunks read from the store per pass. */
#define LOG_PAGE 64

/* FNV-1a of a job id. */
static uint64_t id_hash(const char *id)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *id; id++) {
		h ^= (unsigned char)*id;
		h *= 1099511628211ULL;
	}
	return h;
}

/* The wait list of one job that streams follow (lock held for all). */
struct cnl_api_ev_watch {
	char job[CNL_ID_MAX];
	uint64_t hash;
	pthread_cond_t cv;
	uint64_t seq;     /* bumped at each note (and tick) for the job */
	unsigned streams; /* following it */
	unsigned pending; /* of which last saw it pending */
	struct cnl_api_ev_watch *next;
};

static struct cnl_api_ev_watch **watch_slot(struct cnl_api *api,
                                            const char *job, uint64_t h)
{
	struct cnl_api_ev_watch **p = &api->ev_watch[h % CNL_API_EV_BUCKETS];

	while (*p && ((*p)->hash != h || strcmp((*p)->job, job) != 0))
		p = &(*p)->next;
	return p;
}

static void watch_wake(struct cnl_api_ev_watch *w)
{
	w->seq++;
	pthread_cond_broadcast(&w->cv);
}

void cnl_api_events_note(struct cnl_api *api, const char *job_id)
{
	struct cnl_api_ev_watch *w = *watch_slot(api, job_id, id_hash(job_id));

	if (w)
		watch_wake(w);
}

void cnl_api_events_changed(void *ud, const char *id)
{
	cnl_api_events_note(ud, id);
}

void cnl_api_events_tick(struct cnl_api *api)
{
	for (size_t i = 0; i < CNL_API_EV_BUCKETS; i++)
		for (struct cnl_api_ev_watch *w = api->ev_watch[i]; w;
		     w = w->next)
			if (w->pending)
				watch_wake(w);
}

void cnl_api_events_stop(struct cnl_api *api)
{
	for (size_t i = 0; i < CNL_API_EV_BUCKETS; i++)
		for (struct cnl_api_ev_watch *w = api->ev_watch[i]; w;
		     w = w->next)
			pthread_cond_broadcast(&w->cv);
}

void cnl_api_events_metrics(struct cnl_api *api, struct cnl_metrics_buf *b)
{
	cnl_mb_family(b, "cnlab_event_streams", "gauge",
	              "Job event streams open (GET /v1/jobs/{job}/events).");
	cnl_mb_printf(b, "cnlab_event_streams %d\n",
	              atomic_load(&api->ev_streams));
	cnl_mb_family(b, "cnlab_event_stream_wakeups_total", "counter",
	              "Times a job event stream was woken: its job changed, "
	              "or a tick moved its pending estimate.");
	cnl_mb_printf(b, "cnlab_event_stream_wakeups_total %llu\n",
	              (unsigned long long)atomic_load(&api->ev_wakeups));
}

/* One open stream. */
struct evstream {
	struct cnl_api *api;
	char job[CNL_ID_MAX];
	struct cnl_api_ev_watch *watch;   /* its job's wait list */
	char after[CNL_STORE_DOC_ID_MAX]; /* the last chunk sent */
	char *last_doc;                   /* the job document last sent */
	bool pending;                     /* as last sent: ticks matter */
	bool done;                        /* the end is queued */
	uint64_t seen;                    /* watch->seq looked at */
	char *out;                        /* bytes queued to send */
	size_t out_len, out_off;
	int64_t last_sent_ms;       /* monotonic */
	struct cnl_api_grant grant; /* who opened it */
	uint64_t auth_gen;          /* as last checked */
	int64_t auth_ms;            /* monotonic: the last check */
};

static void out_add(struct evstream *s, const char *a, size_t n)
{
	s->out = cnl_xrealloc(s->out, s->out_len + n + 1);
	memcpy(s->out + s->out_len, a, n);
	s->out_len += n;
	s->out[s->out_len] = '\0';
}

static void out_str(struct evstream *s, const char *a)
{
	out_add(s, a, strlen(a));
}

/* One event: "[id: ID\n]event: NAME\ndata: JSON\n\n" (compact JSON is
 * one line: its strings escape line breaks). */
static void out_event(struct evstream *s, const char *id, const char *name,
                      const char *data)
{
	if (id) {
		out_str(s, "id: ");
		out_str(s, id);
		out_str(s, "\n");
	}
	out_str(s, "event: ");
	out_str(s, name);
	out_str(s, "\ndata: ");
	out_str(s, data);
	out_str(s, "\n\n");
}

static bool final_state(const char *st)
{
	return strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 ||
	       strcmp(st, "cancelled") == 0;
}

/* Follow @s's job: its wait list, made when it is the first (lock held). */
static void watch_join(struct evstream *s)
{
	struct cnl_api *api = s->api;
	uint64_t h = id_hash(s->job);
	struct cnl_api_ev_watch **p = watch_slot(api, s->job, h), *w = *p;

	if (!w) {
		w = cnl_xcalloc(1, sizeof(*w));
		snprintf(w->job, sizeof(w->job), "%s", s->job);
		w->hash = h;
		pthread_cond_init(&w->cv, NULL);
		*p = w;
	}
	w->streams++;
	w->pending += s->pending;
	s->watch = w;
	s->seen = w->seq;
	atomic_fetch_add(&api->ev_streams, 1);
}

/* Stop following (lock held); the last stream of a job frees its list. */
static void watch_leave(struct evstream *s)
{
	struct cnl_api_ev_watch *w = s->watch, **p;

	if (!w)
		return;
	s->watch = NULL;
	w->pending -= s->pending;
	atomic_fetch_sub(&s->api->ev_streams, 1);
	if (--w->streams)
		return;
	p = watch_slot(s->api, w->job, w->hash);
	*p = w->next;
	pthread_cond_destroy(&w->cv);
	free(w);
}

static void set_pending(struct evstream *s, bool pending)
{
	if (s->watch && pending != s->pending)
		s->watch->pending += pending ? 1u : -1u;
	s->pending = pending;
}

/* May the stream's caller still see its job (lock held)?  Asked only
 * after an authentication-relevant change, or every REAUTH_MS. */
static bool still_allowed(struct evstream *s, const char *project_id)
{
	struct call c = {
	    .api = s->api, .st = s->api->store, .now_ms = cnl_time_now_ms()};
	uint64_t gen = cnl_api_dash_auth_gen(s->api);
	int64_t now = cnl_time_mono_ns() / 1000000;
	char role[CNL_STORE_ROLE_MAX];

	if (gen == s->auth_gen && now - s->auth_ms < REAUTH_MS)
		return true;
	if (cnl_api_grant_live(&c, &s->grant) < 0)
		return false;
	if (!c.is_admin &&
	    cnl_store_membership_get_role(c.st, c.user.id, project_id, role,
	                                  sizeof(role)) < 0)
		return false;
	s->auth_gen = gen;
	s->auth_ms = now;
	return true;
}

/*
 * Queue what is new for the stream (lock held): the job document if it
 * changed, the output chunks after s->after, and the end when the job is
 * over and its output all sent.  1 when something was queued, 0 when
 * nothing, -1 when the stream must end (the job is gone, a store error).
 */
static int gather(struct evstream *s)
{
	struct call c = {
	    .api = s->api, .st = s->api->store, .now_ms = cnl_time_now_ms()};
	struct cnl_store_doc d[LOG_PAGE];
	struct cnl_store_job j;
	bool final, more = false;
	size_t before = s->out_len;
	char *text;
	json_t *o;
	int n = 0;

	if (cnl_store_job_get(s->api->store, s->job, &j) < 0)
		return -1;
	if (!still_allowed(s, j.project_id))
		return -1;
	final = final_state(j.state);
	set_pending(s, strcmp(j.state, "pending") == 0);
	o = cnl_api_job_json(&c, &j);
	text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!text)
		return -1;
	if (!s->last_doc || strcmp(text, s->last_doc) != 0) {
		out_event(s, NULL, "job", text);
		free(s->last_doc);
		s->last_doc = text;
	} else {
		free(text);
	}
	memset(d, 0, sizeof(d));
	if (cnl_store_doc_list(s->api->store, "log", s->job,
	                       s->after[0] ? s->after : NULL, LOG_PAGE, d,
	                       &n) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		json_t *b = json_loads(d[i].body, 0, NULL);
		char *t;

		if (!b)
			continue;
		json_object_set_new(b, "id", json_string(d[i].id));
		json_object_set_new(b, "at",
		                    cnl_api_time_json(d[i].updated_ms));
		if ((t = json_dumps(b, JSON_COMPACT))) {
			out_event(s, d[i].id, "log", t);
			free(t);
		}
		json_decref(b);
		snprintf(s->after, sizeof(s->after), "%s", d[i].id);
	}
	more = n == LOG_PAGE;
	cnl_store_docs_done(d, n);
	if (final && !more) {
		out_event(s, NULL, "end", s->last_doc);
		s->done = true;
	}
	return s->out_len > before || more;
}

/* Sleep until the stream's job changes or @left_ms pass (lock held). */
static void wait_change(struct evstream *s, int64_t left_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += left_ms / 1000;
	ts.tv_nsec += (left_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (pthread_cond_timedwait(&s->watch->cv, &s->api->mu, &ts) == 0)
		atomic_fetch_add(&s->api->ev_wakeups, 1);
}

static ssize_t ev_read(void *arg, char *buf, size_t max)
{
	struct evstream *s = arg;
	struct cnl_api *api = s->api;
	int64_t seq;
	size_t n;

	if (s->out_off == s->out_len) {
		s->out_off = s->out_len = 0;
		if (s->done)
			return 0;
		pthread_mutex_lock(&api->mu);
		for (;;) {
			int64_t now = cnl_time_mono_ns() / 1000000, left;
			int r;

			if (atomic_load(&api->proxy_stop)) {
				pthread_mutex_unlock(&api->mu);
				return 0; /* cnlabd stops: the client resumes */
			}
			s->seen = s->watch->seq;
			if ((r = gather(s)) < 0) {
				pthread_mutex_unlock(&api->mu);
				return -1;
			}
			if (r > 0)
				break;
			left = s->last_sent_ms + KEEPALIVE_MS - now;
			if (left <= 0) {
				out_str(s, ": keep-alive\n\n");
				break;
			}
			/* Sleep until the job changes, or the keep-alive is
			 * due. */
			while (s->seen == s->watch->seq && left > 0 &&
			       !atomic_load(&api->proxy_stop)) {
				wait_change(s, left);
				now = cnl_time_mono_ns() / 1000000;
				left = s->last_sent_ms + KEEPALIVE_MS - now;
			}
		}
		seq = cnl_commit_mark(api->commit);
		pthread_mutex_unlock(&api->mu);
		/* Only what is durable goes out (a sync failure ends the
		 * stream; the client resumes from what it was sent). */
		if (cnl_commit_wait(api->commit, seq) < 0)
			return -1;
		s->last_sent_ms = cnl_time_mono_ns() / 1000000;
	}
	n = s->out_len - s->out_off;
	if (n > max)
		n = max;
	memcpy(buf, s->out + s->out_off, n);
	s->out_off += n;
	return (ssize_t)n;
}

static void ev_free(void *arg)
{
	struct evstream *s = arg;

	if (s->watch) { /* called without the lock */
		pthread_mutex_lock(&s->api->mu);
		watch_leave(s);
		pthread_mutex_unlock(&s->api->mu);
	}
	free(s->last_doc);
	free(s->out);
	free(s);
}

/* A resume point as the client sent it: a log id, printable ASCII. */
static bool good_after(const char *a)
{
	size_t n = strlen(a);

	if (n >= CNL_STORE_DOC_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (a[i] < 0x21 || a[i] > 0x7e)
			return false;
	return true;
}

void cnl_api_h_job_events(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *after = cnl_http_query(req, "after");
	const char *field = "after";
	struct evstream *s;

	if (!after) {
		after = cnl_http_header(req, "Last-Event-ID");
		field = "Last-Event-ID";
	}
	if (after && !good_after(after)) {
		cnl_http_error(resp, 400, "bad_request",
		               "%s \"%s\": must be the id of an event of this "
		               "stream (a log id, 1..%d printable characters)",
		               strcmp(field, "after") ? "header" : "field",
		               field, CNL_STORE_DOC_ID_MAX - 1);
		return;
	}
	s = cnl_xcalloc(1, sizeof(*s));
	s->api = c->api;
	snprintf(s->job, sizeof(s->job), "%s", c->job.id);
	cnl_api_grant_of(c, &s->grant);
	s->auth_gen = cnl_api_dash_auth_gen(c->api);
	s->auth_ms = cnl_time_mono_ns() / 1000000;
	if (after)
		snprintf(s->after, sizeof(s->after), "%s", after);
	/* The first pass runs under this call's lock: what the stream
	 * starts with is there in the first read, with no wait. */
	if (gather(s) < 0) {
		ev_free(s);
		cnl_http_error(resp, 500, "internal", "cannot read the job");
		return;
	}
	watch_join(s);
	s->last_sent_ms = cnl_time_mono_ns() / 1000000;
	resp->status = 200;
	resp->content_type = "text/event-stream";
	resp->headers = cnl_xstrdup("X-Accel-Buffering: no\r\n");
	resp->stream_read = ev_read;
	resp->stream_free = ev_free;
	resp->stream_arg = s;
	resp->stream_size = -1;
}
