/*
 * forward.c - a follower's listener: every replica serves the API
 * (forward.h).
 *
 *   client ──HTTP──► follower (this file) ──HTTP──► leader's listener
 *                        │
 *                        └─ reads of the database: a follower's API
 *                           (main.c hands it over: forward.h), here
 *
 * Every request is taken from its head (pass_open): /healthz and /metrics
 * are answered here, the reads a follower's API serves are declined (the
 * listener routes them to it, as the leader's would), and the rest go up.
 *
 * A request goes up as it came, on a connection of its own: HTTP/1.0
 * with "Connection: close" (the leader's reply then ends where the
 * connection does, needing no framing of ours), its headers as sent
 * (Authorization included: the leader authenticates and audits it as
 * usual) less the hop-by-hop ones, plus "CNLab-Forwarded-By: LABEL" and
 * the replicas' proof (forward.h).  A body is streamed up as it arrives,
 * with its Content-Length; one without (chunked) is refused with 411,
 * whatever else the request says.  An upgrade (Upgrade: with
 * "Connection: upgrade", not h2c: exec, ssh, a node's tunnel) goes up as
 * HTTP/1.1; on the leader's 101 the client gets the 101 and a thread
 * relays both ways until either side ends.  The reply's head is passed
 * back as the leader sent it, less the hop-by-hop headers, and its body
 * streamed as it comes (Server-Sent Events and long polls included); an
 * early answer to a body not all sent (413, 401) is passed back too.
 *
 * Errors are honest about what happened: a leader that cannot be reached
 * before anything was sent is 503 "not_leader" (nothing was done: the
 * HTTP client tries its next address); one that stops answering after the
 * request went up is 502 (it may have done it).  A request that already
 * went through a follower is not forwarded again (503 not_leader): two
 * replicas that each take the other for the leader, or a load balancer
 * between them, cannot make a loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "net/http_server.h"
#include "net/metrics.h"
#include "server/forward.h"
#include "server/leader.h"

/* Largest head of the leader's reply. */
#define HEAD_MAX (64 * 1024)
/* A leader that says nothing for this long is dropped: its streams send
 * a keep-alive every 15 s and its long polls answer within 30 s, and the
 * CLI itself gives up after 60 s of silence. */
#define IDLE_MS (75 * 1000)
/* To connect to the leader. */
#define CONNECT_MS 3000

#define FWD_HEADER "CNLab-Forwarded-By"

static struct {
	atomic_bool stop;
	atomic_uint_fast64_t forwarded, refused, failed, n_local;
	char label[CNL_FORWARD_LABEL_MAX];
	char cafile[CNL_FORWARD_LABEL_MAX];
	/* Whether the leader took the last connection made to it (a
	 * forward's or a health check's), and when (monotonic ms). */
	atomic_bool reached;
	_Atomic int64_t reached_at;
	atomic_int reach_state; /* 0 not tried, 1 reached, 2 not */
	char proof[CNL_FORWARD_PROOF_LEN];
	struct cnl_forward_local local; /* .serves NULL: none */
} g;

struct fwd {
	struct cnl_client *cl;
	struct cnl_client_stream *s;
	bool upgrade;
	bool failed; /* the body could not all go up */
	char leader[CNL_STORE_LEASE_HOLDER_MAX];
	int64_t epoch; /* the leader's, when the request went up */
	/* The leader's reply: bytes read past its head. */
	char *buf;
	size_t n, off;
};

static void fwd_free(void *state)
{
	struct fwd *f = state;

	if (!f)
		return;
	cnl_client_stream_free(f->s);
	cnl_client_free(f->cl);
	free(f->buf);
	free(f);
}

/* ---- bytes --------------------------------------------------------- */

/* Whether the leader @f went to still leads, as far as the lease says:
 * one paused or cut off past its lease, or replaced, answers nothing that
 * counts, so a wait on it (a long poll, a stream) ends. */
static bool still_leads(const struct fwd *f)
{
	struct cnl_leader_seen s;

	cnl_leader_seen(&s);
	return !atomic_load(&g.stop) && s.live && s.epoch == f->epoch;
}

/* Up to @n bytes from the leader, waiting up to IDLE_MS a second at a
 * time while it leads: > 0, 0 at its end, < 0. */
static ssize_t up_read(struct fwd *f, char *buf, size_t n)
{
	int fd = cnl_client_stream_fd(f->s);

	for (int waited = 0; waited < IDLE_MS;) {
		ssize_t r = cnl_client_stream_read(f->s, buf, n);
		struct pollfd p = {fd, POLLIN, 0};

		if (r != -EAGAIN)
			return r;
		r = poll(&p, 1, 1000);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0) {
			waited += 1000;
			if (!still_leads(f))
				return -ECONNABORTED;
		}
	}
	return -ETIMEDOUT;
}

/* All @n bytes to the client's socket @fd (an upgraded connection); a
 * client that takes nothing for IDLE_MS is given up. */
static int down_write(int fd, const char *buf, size_t n)
{
	int waited = 0;

	while (n && !atomic_load(&g.stop) && waited < IDLE_MS) {
		ssize_t w = send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd p = {fd, POLLOUT, 0};

			if (poll(&p, 1, 1000) == 0)
				waited += 1000;
			continue;
		}
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return n ? -1 : 0;
}

/* ---- the request --------------------------------------------------- */

/* A header that belongs to one connection, never sent on. */
static bool hop_header(const char *name)
{
	static const char *const drop[] = {"Connection",
	                                   "Keep-Alive",
	                                   "Proxy-Authorization",
	                                   "TE",
	                                   "Trailer",
	                                   "Transfer-Encoding",
	                                   "Upgrade",
	                                   "Proxy-Connection",
	                                   "Expect",
	                                   FWD_HEADER,
	                                   "Proxy-Authenticate",
	                                   CNL_FORWARD_PROOF_HEADER};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(drop); i++)
		if (strcasecmp(name, drop[i]) == 0)
			return true;
	return false;
}

/* Whether @s holds a byte that would end or split a line of the head
 * (a control character other than tab), which goes up nowhere. */
static bool unsafe(const char *s, bool space_too)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch < 0x20 && ch != '\t') || ch == 0x7f ||
		    (space_too && (ch == ' ' || ch == '\t')))
			return true;
	}
	return false;
}

struct head_ctx {
	struct cnl_metrics_buf *b;
	bool bad;
};

static void head_add(void *arg, const char *name, const char *value)
{
	struct head_ctx *h = arg;

	if (unsafe(name, true) || unsafe(value, false) || !name[0])
		h->bad = true;
	else if (!hop_header(name))
		cnl_mb_printf(h->b, "%s: %s\r\n", name, value);
}

/* The leader's address as the standby's wait last read it, or why there
 * is none to forward to (into @why). */
static bool leader_url(char *url, size_t len, int64_t *epoch, char *why,
                       size_t whylen)
{
	struct cnl_leader_seen s;

	cnl_leader_seen(&s);
	snprintf(url, len, "%s", s.leader);
	*epoch = s.epoch;
	if (!s.live) {
		snprintf(why, whylen,
		         "no cnlabd leads at the moment (being elected)");
		return false;
	}
	if (strncmp(url, "http://", 7) != 0 &&
	    strncmp(url, "https://", 8) != 0) {
		snprintf(why, whylen,
		         "the leader is %s (epoch %" PRId64
		         "), which names no URL to forward to (set its "
		         "replica_url): retry there",
		         url, s.epoch);
		return false;
	}
	if (strcmp(url, g.label) == 0) {
		snprintf(why, whylen, "the lease names this cnlabd (%s)", url);
		return false;
	}
	return true;
}

/* Whether a Connection header's tokens name "upgrade". */
static bool conn_upgrade(const char *v)
{
	while (v && *v) {
		size_t n;

		v += strspn(v, " \t,");
		n = strcspn(v, " \t,");
		if (n == 7 && strncasecmp(v, "upgrade", 7) == 0)
			return true;
		v += n;
	}
	return false;
}

/* What the last connection to the leader at @url found; a change is
 * logged, not every failure (while the leader is away every request
 * would say it again). */
static void note_reach(const char *url, bool ok, const char *err)
{
	int prev = atomic_exchange(&g.reach_state, ok ? 1 : 2);

	atomic_store(&g.reached, ok);
	atomic_store(&g.reached_at, cnl_time_mono_ns() / 1000000);
	if (!ok && prev != 2)
		cnl_log(CNL_LOG_WARN, "cannot forward to the leader",
		        "leader=%s why=\"%s\"", url, err);
	else if (ok && prev == 2)
		cnl_log(CNL_LOG_INFO, "the leader answers again", "leader=%s",
		        url);
}

/* A connection to @url (TLS and its certificate included), the
 * leader's: 0 with *@ret, or < 0 with @err. */
static int dial(const char *url, long ms, struct cnl_client **cl,
                struct cnl_client_stream **ret, char *err, size_t errlen)
{
	int r = cnl_client_new(
	    &(struct cnl_client_config){
	        .base = url,
	        .cafile = g.cafile[0] ? g.cafile : NULL,
	        .connect_timeout_ms = ms,
	    },
	    cl);

	if (r < 0) {
		snprintf(err, errlen, "%s", cnl_strerror(r));
		*cl = NULL;
	} else {
		r = cnl_client_dial(*cl, ret, err, errlen);
	}
	note_reach(url, r == 0, err);
	return r;
}

/* Whether the leader at @url takes a connection now: what a forward
 * found in the last second, else a connection made to see. */
static bool reachable(const char *url)
{
	struct cnl_client_stream *s = NULL;
	struct cnl_client *cl = NULL;
	char err[256];

	if (cnl_time_mono_ns() / 1000000 - atomic_load(&g.reached_at) < 1000)
		return atomic_load(&g.reached);
	(void)dial(url, 1000, &cl, &s, err, sizeof(err));
	cnl_client_stream_free(s);
	cnl_client_free(cl);
	return atomic_load(&g.reached);
}

static void not_leader(struct cnl_http_response *resp, const char *why)
{
	cnl_http_error(resp, 503, "not_leader",
	               "this cnlabd follows and cannot forward: %s", why);
	free(resp->headers);
	resp->headers = cnl_xstrdup("Retry-After: 1\r\n");
	atomic_fetch_add(&g.refused, 1);
}

/* GET /healthz on a follower: 200 while it can forward (a load balancer
 * may send it anything), else 503. */
static void healthz(struct cnl_http_response *resp)
{
	struct cnl_leader_seen s;
	bool ok, reach;
	json_t *o;

	cnl_leader_seen(&s);
	ok = s.live && (strncmp(s.leader, "http://", 7) == 0 ||
	                strncmp(s.leader, "https://", 8) == 0);
	/* A follower that cannot reach the leader serves nothing: a load
	 * balancer must look elsewhere. */
	reach = ok && reachable(s.leader);
	o = json_pack("{s:s,s:s,s:s,s:I}", "status",
	              reach ? "ok"
	              : ok  ? "unreachable"
	                    : "standby",
	              "role", "follower", "leader", s.leader, "epoch",
	              (json_int_t)s.epoch);
	json_object_set_new(o, "store_lag_ms",
	                    s.age_ms < 0 ? json_null()
	                                 : json_integer(s.age_ms));
	cnl_http_reply(resp, reach ? 200 : 503, o);
	if (!reach) {
		free(resp->headers);
		resp->headers = cnl_xstrdup("Retry-After: 1\r\n");
	}
}

/* GET /metrics on a follower: its own few (the platform's are the
 * leader's). */
static void metrics(struct cnl_http_response *resp)
{
	struct cnl_metrics_buf b = {0};
	struct cnl_leader_seen s;

	cnl_leader_seen(&s);
	cnl_mb_family(&b, "cnlab_leader", "gauge",
	              "1 when this cnlabd leads, 0 when it follows");
	cnl_mb_printf(&b, "cnlab_leader 0\n");
	cnl_mb_family(&b, "cnlab_leader_epoch", "gauge",
	              "the epoch of the leader's lease (a follower: the "
	              "lease it last read)");
	cnl_mb_printf(&b, "cnlab_leader_epoch %" PRId64 "\n", s.epoch);
	cnl_mb_family(&b, "cnlab_store_lag_seconds", "gauge",
	              "how old this follower's view of the lease is");
	cnl_mb_printf(&b, "cnlab_store_lag_seconds %.3f\n",
	              s.age_ms < 0 ? 0.0 : (double)s.age_ms / 1000.0);
	cnl_mb_family(&b, "cnlab_forwarded_requests_total", "counter",
	              "requests this follower forwarded to the leader, by "
	              "outcome");
	cnl_mb_printf(&b,
	              "cnlab_forwarded_requests_total{outcome=\"ok\"} %" PRIu64
	              "\n"
	              "cnlab_forwarded_requests_total{outcome=\"refused\"} "
	              "%" PRIu64 "\n"
	              "cnlab_forwarded_requests_total{outcome=\"failed\"} "
	              "%" PRIu64 "\n",
	              (uint64_t)atomic_load(&g.forwarded),
	              (uint64_t)atomic_load(&g.refused),
	              (uint64_t)atomic_load(&g.failed));
	cnl_mb_family(&b, "cnlab_follower_local_requests_total", "counter",
	              "requests this follower answered itself from the "
	              "store (reads that need no leader)");
	cnl_mb_printf(&b, "cnlab_follower_local_requests_total %" PRIu64 "\n",
	              (uint64_t)atomic_load(&g.n_local));
	resp->status = 200;
	resp->text = b.p;
	resp->text_len = b.n;
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

static int fwd_open(void *ud, struct cnl_http_request *req,
                    struct cnl_http_response *resp, void **ret_state)
{
	const char *up = cnl_http_header(req, "Upgrade");
	const char *te = cnl_http_header(req, "Transfer-Encoding");
	struct cnl_metrics_buf h = {0};
	struct fwd *f;
	char url[CNL_STORE_LEASE_HOLDER_MAX], why[512], err[512];
	int64_t epoch;
	int r;

	*ret_state = NULL;
	if (strcmp(req->method, "GET") == 0 &&
	    strcmp(req->path, "/healthz") == 0) {
		healthz(resp);
		return -1;
	}
	if (strcmp(req->method, "GET") == 0 &&
	    strcmp(req->path, "/metrics") == 0) {
		metrics(resp);
		return -1;
	}
	/* The reads of the store it answers itself, leader or not. */
	if (g.local.serves && g.local.serves(g.local.ud, req)) {
		atomic_fetch_add(&g.n_local, 1);
		return 1;
	}
	if (cnl_http_header(req, FWD_HEADER)) {
		not_leader(resp, "the request was forwarded once already");
		return -1;
	}
	if (!leader_url(url, sizeof(url), &epoch, why, sizeof(why))) {
		not_leader(resp, why);
		return -1;
	}
	/* An upgrade goes up as one only when asked for as the protocol
	 * says (Connection: upgrade) and it is not HTTP/2's (h2c, which
	 * the leader does not speak either): otherwise the Upgrade header
	 * is the connection's and is dropped. */
	if (up && (!conn_upgrade(cnl_http_header(req, "Connection")) ||
	           strcasecmp(up, "h2c") == 0))
		up = NULL;
	if (te) {
		cnl_http_error(resp, 411, "length_required",
		               "a follower forwards a body only with its "
		               "Content-Length, not Transfer-Encoding");
		return -1;
	}
	/* What goes up is what the leader would have parsed itself: no
	 * byte that could make two requests of one. */
	if (unsafe(req->uri, true) || unsafe(req->method, true) ||
	    (up && unsafe(up, false))) {
		cnl_http_error(resp, 400, "bad_request",
		               "the request line holds a control character or "
		               "a space");
		return -1;
	}
	f = cnl_xcalloc(1, sizeof(*f));
	f->upgrade = up != NULL;
	f->epoch = epoch;
	snprintf(f->leader, sizeof(f->leader), "%s", url);
	if ((r = dial(url, CONNECT_MS, &f->cl, &f->s, err, sizeof(err))) < 0) {
		snprintf(why, sizeof(why), "the leader at %s cannot be reached",
		         url);
		fwd_free(f);
		not_leader(resp, why);
		return -1;
	}
	/* The head as the leader is to see it. */
	cnl_mb_printf(&h, "%s %s HTTP/%s\r\n", req->method, req->uri,
	              f->upgrade ? "1.1" : "1.0");
	{
		struct head_ctx hc = {&h, false};

		cnl_http_headers_each(req, head_add, &hc);
		if (hc.bad) {
			explicit_bzero(h.p, h.n);
			free(h.p);
			fwd_free(f);
			cnl_http_error(resp, 400, "bad_request",
			               "a header holds a control character");
			return -1;
		}
	}
	if (f->upgrade)
		cnl_mb_printf(&h, "Connection: Upgrade\r\nUpgrade: %s\r\n", up);
	else
		cnl_mb_printf(&h, "Connection: close\r\n");
	if (g.proof[0])
		cnl_mb_printf(&h, "%s: %s\r\n", CNL_FORWARD_PROOF_HEADER,
		              g.proof);
	cnl_mb_printf(&h, "%s: %s\r\n\r\n", FWD_HEADER,
	              g.label[0] ? g.label : "follower");
	r = cnl_client_stream_write(f->s, h.p, h.n);
	explicit_bzero(h.p, h.n); /* the caller's credential */
	free(h.p);
	if (r < 0) {
		fwd_free(f);
		snprintf(why, sizeof(why),
		         "the leader at %s closed the connection at once", url);
		not_leader(resp, why);
		return -1;
	}
	*ret_state = f;
	return 0;
}

static int fwd_body(void *state, const char *data, size_t n)
{
	struct fwd *f = state;

	if (f->failed || cnl_client_stream_write(f->s, data, n) < 0) {
		f->failed = true;
		return -1;
	}
	return 0;
}

/* ---- the reply ----------------------------------------------------- */

/* Read the head of the leader's reply into f->buf, past any interim 1xx
 * but a 101: its length, or -1. */
static ssize_t read_head(struct fwd *f)
{
	f->buf = cnl_xmalloc(HEAD_MAX + 1);
	for (;;) {
		char *end;
		ssize_t r;
		int st;

		if ((end = f->n ? strstr(f->buf, "\r\n\r\n") : NULL)) {
			size_t hl = (size_t)(end + 4 - f->buf);

			if (sscanf(f->buf, "HTTP/%*d.%*d %d", &st) == 1 &&
			    st >= 100 && st < 200 && st != 101) {
				memmove(f->buf, f->buf + hl, f->n - hl);
				f->n -= hl;
				f->buf[f->n] = '\0';
				continue;
			}
			return (ssize_t)hl;
		}
		if (f->n >= HEAD_MAX)
			return -1;
		r = up_read(f, f->buf + f->n, HEAD_MAX - f->n);
		if (r <= 0)
			return -1;
		f->n += (size_t)r;
		f->buf[f->n] = '\0';
	}
}

static ssize_t body_read(void *arg, char *buf, size_t max)
{
	struct fwd *f = arg;

	if (f->off < f->n) {
		size_t k = f->n - f->off < max ? f->n - f->off : max;

		memcpy(buf, f->buf + f->off, k);
		f->off += k;
		return (ssize_t)k;
	}
	return up_read(f, buf, max);
}

struct relay {
	struct fwd *f;
	int fd; /* the client's */
	struct cnl_http_upgrade *u;
	char *extra; /* the client's bytes read past its request */
	size_t extra_n;
};

/* Both ways until either side ends or the listener stops. */
static void relay(struct fwd *f, int fd)
{
	struct pollfd pf[2] = {{fd, POLLIN, 0},
	                       {cnl_client_stream_fd(f->s), POLLIN, 0}};
	char buf[65536];

	while (still_leads(f)) {
		ssize_t n;

		/* The leader's side may hold bytes TLS already read. */
		n = cnl_client_stream_read(f->s, buf, sizeof(buf));
		if (n > 0) {
			if (down_write(fd, buf, (size_t)n) < 0)
				return;
			continue;
		}
		if (n != -EAGAIN)
			return;
		if (poll(pf, 2, 1000) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0 ||
			    cnl_client_stream_write(f->s, buf, (size_t)n) < 0)
				return;
		}
	}
}

static void *relay_thread(void *arg)
{
	struct relay *w = arg;
	struct fwd *f = w->f;

	if ((!w->extra_n ||
	     cnl_client_stream_write(f->s, w->extra, w->extra_n) == 0) &&
	    (f->off >= f->n ||
	     down_write(w->fd, f->buf + f->off, f->n - f->off) == 0))
		relay(f, w->fd);
	cnl_http_upgrade_close(w->u);
	fwd_free(f);
	free(w->extra);
	free(w);
	return NULL;
}

static void upgraded(void *arg, int fd, const char *extra, size_t n,
                     struct cnl_http_upgrade *u)
{
	struct relay *w = cnl_xcalloc(1, sizeof(*w));
	pthread_attr_t at;
	pthread_t t;

	w->f = arg;
	w->fd = fd;
	w->u = u;
	if (n) {
		w->extra = cnl_xmalloc(n);
		memcpy(w->extra, extra, n);
		w->extra_n = n;
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, relay_thread, w) != 0) {
		cnl_http_upgrade_close(u);
		fwd_free(w->f);
		free(w->extra);
		free(w);
	}
	pthread_attr_destroy(&at);
}

/* A forward that ended without a reply to pass on: 502 saying what the
 * leader (named) did, counted as failed; @f is freed. */
static void bad_gateway(struct fwd *f, struct cnl_http_response *resp,
                        const char *what)
{
	cnl_http_error(resp, 502, "bad_gateway", "the leader (%s) %s",
	               f->leader, what);
	atomic_fetch_add(&g.failed, 1);
	fwd_free(f);
}

static void fwd_end(void *state, struct cnl_http_request *req,
                    struct cnl_http_response *resp)
{
	struct fwd *f = state;
	struct cnl_metrics_buf hdr = {0};
	int64_t length = -1;
	/* A body that could not all go up may have been cut short by the
	 * leader's own early answer (413, 401, 400 before the end): that
	 * answer, when it came, is the reply. */
	ssize_t hl = read_head(f);
	int status = 0;
	bool chunked = false;
	char *line;

	(void)req;
	if (hl < 0 || sscanf(f->buf, "HTTP/%*d.%*d %d", &status) != 1 ||
	    status < 100 || status > 599) {
		cnl_log(CNL_LOG_WARN,
		        "the leader did not answer a forwarded "
		        "request",
		        "leader=%s", f->leader);
		bad_gateway(f, resp,
		            "took the request and did not answer: it may or "
		            "may not have done it");
		return;
	}
	f->buf[hl - 2] = '\0';
	line = strstr(f->buf, "\r\n");
	for (line = line ? line + 2 : NULL; line && *line;) {
		char *eol = strstr(line, "\r\n"), *colon;

		if (eol)
			*eol = '\0';
		if ((colon = strchr(line, ':'))) {
			const char *v = colon + 1;

			*colon = '\0';
			while (*v == ' ' || *v == '\t')
				v++;
			if (strcasecmp(line, "Content-Length") == 0)
				length = strtoll(v, NULL, 10);
			else if (strcasecmp(line, "Transfer-Encoding") == 0 &&
			         status != 101)
				chunked = true;
			else if (!hop_header(line) ||
			         (status == 101 &&
			          strcasecmp(line, "Upgrade") == 0))
				cnl_mb_printf(&hdr, "%s: %s\r\n", line, v);
		}
		line = eol ? eol + 2 : NULL;
	}
	/* Asked as HTTP/1.0 (or for an upgrade), the leader frames a reply
	 * by its length or its end: a chunked one is not passed on as if
	 * it were the body. */
	if (chunked) {
		free(hdr.p);
		bad_gateway(f, resp,
		            "answered in a framing this follower does not "
		            "pass on");
		return;
	}
	atomic_fetch_add(&g.forwarded, 1);
	f->off = (size_t)hl;
	resp->status = (unsigned)status;
	resp->headers = hdr.p;
	resp->no_defaults = true;
	if (f->upgrade && status == 101) {
		resp->upgraded = upgraded;
		resp->upgrade_free = fwd_free;
		resp->upgrade_arg = f;
	} else {
		resp->stream_read = body_read;
		resp->stream_free = fwd_free;
		resp->stream_arg = f;
		resp->stream_size = status == 204 || status == 304 ? 0 : length;
	}
}

/* ---- the listener -------------------------------------------------- */

/* Without an API: every request is passed (fwd_open()), so neither of
 * these is ever called (the route table must name a handler). */
static void fwd_serve(void *ud, const struct cnl_http_route *route,
                      struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	(void)ud;
	(void)route;
	(void)req;
	cnl_http_error(resp, 503, "not_leader", "this cnlabd follows");
}

static void fwd_handler(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	(void)call;
	(void)req;
	cnl_http_error(resp, 503, "not_leader", "this cnlabd follows");
}

void cnl_forward_proof(const void *key, size_t len,
                       char out[CNL_FORWARD_PROOF_LEN])
{
	static const char text[] = "cnlab replica forwarding v1";
	unsigned char mac[32];
	unsigned int n = 0;

	HMAC(EVP_sha256(), key, (int)len, (const unsigned char *)text,
	     sizeof(text) - 1, mac, &n);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	OPENSSL_cleanse(mac, sizeof(mac));
}

void cnl_forward_set_proof(const char *proof)
{
	snprintf(g.proof, sizeof(g.proof), "%s", proof ? proof : "");
}

bool cnl_forward_trusted(void *proof, const char *value)
{
	const char *p = proof;

	return p && p[0] && value && strlen(value) == strlen(p) &&
	       CRYPTO_memcmp(p, value, strlen(p)) == 0;
}

void cnl_forward_label(const char *label)
{
	snprintf(g.label, sizeof(g.label), "%s", label ? label : "");
}

int cnl_forward_listen(const struct cnl_http_config *cfg, const char *cafile,
                       const struct cnl_forward_local *local,
                       struct cnl_http_server **ret, char *err, size_t errlen)
{
	static const struct cnl_http_route routes[] = {
	    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, fwd_handler},
	};
	struct cnl_http_config c = *cfg;

	atomic_store(&g.stop, false);
	snprintf(g.cafile, sizeof(g.cafile), "%s", cafile ? cafile : "");
	g.local = local ? *local : (struct cnl_forward_local){0};
	if (local) {
		/* What fwd_open() leaves to the routes is the API's. */
		c.routes = local->routes;
		c.nroutes = local->nroutes;
		c.serve = local->serve;
	} else {
		c.routes = routes;
		c.nroutes = CNL_ARRAY_SIZE(routes);
		c.serve = fwd_serve;
	}
	c.open_sink = NULL;
	/* Every request, /healthz included, is taken from its head. */
	c.pass_prefix = "/";
	c.pass_open = fwd_open;
	c.pass_body = fwd_body;
	c.pass_end = fwd_end;
	c.pass_free = fwd_free;
	c.ud = local ? local->ud : NULL;
	return cnl_http_server_new(&c, ret, err, errlen);
}

void cnl_forward_stop(struct cnl_http_server *srv)
{
	atomic_store(&g.stop, true);
	cnl_http_server_free(srv);
}
