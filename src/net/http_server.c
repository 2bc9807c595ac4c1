/*
 * http_server.c - the HTTP server wrapper over libmicrohttpd (see
 * http_server.h).
 *
 * libmicrohttpd calls the access handler several times per request: once
 * with the headers (we allocate a struct conn_state), then once per chunk
 * of body (we append, or only count once past the limit), then once with
 * no data, when we route and reply.  A body whose Content-Length already
 * exceeds the limit is refused on the first call, before any of it is read;
 * a chunked body is read and discarded past the limit and refused at the
 * end, so the buffer never grows beyond body_max + 1 bytes.
 *
 * With open_sink, a request is matched on the first call, with the
 * headers: open_sink says whether its route streams, and then either
 * answers at once (nothing of the body is read) or gives a sink, which
 * takes each chunk instead of the buffer.
 *
 * Connections (see http_server.h for what they promise).  libmicrohttpd
 * runs without a listening socket of its own: the acceptor thread here
 * owns it, and each admitted connection goes to libmicrohttpd with
 * MHD_add_connection().  A table indexed by descriptor follows every
 * admitted connection through its phases:
 *
 *   HEAD --(head in: first access call)--> BODY --(last call)--> BUSY
 *    ^                                       |  each chunk: since = now
 *    +---------(request completed)-----------+---------------------+
 *   BUSY --(101 handed over)--> UPGRADED (never timed out)
 *   HEAD, BODY --(timeout, acceptor's tick)--> CUT (socket shut down)
 *
 * The acceptor checks HEAD against header_timeout and BODY against
 * body_timeout on each tick, and shuts a late socket down under the table
 * lock; libmicrohttpd's thread then sees the end and closes it.  The
 * close notification (on_connection) frees the row under the same lock,
 * and libmicrohttpd closes the descriptor only after it, so a shutdown
 * never reaches a descriptor that was reused.
 *
 * Refused connections (plain HTTP) get a ready-made 503, written at once,
 * then wait in the acceptor's linger list, their input read and thrown
 * away, until the client closes or LINGER_MS passed: closing a socket
 * with unread input would send a reset that can destroy the reply.
 */
#define _GNU_SOURCE /* asprintf, accept4, pthread_setname_np, strcasestr */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"
#include "net/error.h"
#include "net/http_server.h"

/* The acceptor's tick: how late a timeout may be noticed. */
#define TICK_MS 100
/* How long a refused connection may take to close its side. */
#define LINGER_MS 2000
/* Refused connections lingering at once; past it one is closed early. */
#define LINGER_MAX 1024
/* Addresses remembered as trusted (trust_header), and for how long. */
#define TRUST_MAX 64
#define TRUST_MS  (10 * 60 * 1000)
/* Connections accepted in one go before the other work of a tick. */
#define ACCEPT_BATCH 256

enum phase { PH_HEAD, PH_BODY, PH_BUSY, PH_UPGRADED, PH_CUT };

/* One admitted connection, at its descriptor's index. */
struct track {
	bool used;
	bool over; /* over a limit: answered 503 once its head is in (TLS) */
	bool uncounted; /* upgraded: no longer in its address's count */
	uint8_t phase;
	uint32_t ip;      /* network order */
	int64_t since_ms; /* the phase's start, or a body's last chunk */
};

/* Connections open from one address. */
struct peer {
	uint32_t ip;
	unsigned n; /* 0: a free row */
};

/* A refused connection waiting for its client to close. */
struct lingering {
	int fd;
	int64_t until_ms;
};

struct cnl_http_server {
	struct MHD_Daemon *daemon;
	struct cnl_http_config cfg;
	uint16_t port;
	int lfd;     /* the listening socket */
	int wake[2]; /* a byte on wake[1] stops the acceptor */
	pthread_t acceptor;
	bool running; /* the acceptor thread was started */
	bool tls;
	/* The ready-made 503s: at the global limit, over the client's cap. */
	char *busy[2];
	size_t busy_len[2];
	pthread_mutex_t mu; /* guards what follows */
	struct track *track;
	int ntrack; /* rows: descriptors at or past it are refused */
	int maxfd;  /* highest row ever used */
	unsigned open, over;
	struct peer *peers; /* conn_max rows */
	struct cnl_http_server_stats stats;
	/* The acceptor's own (no lock). */
	struct lingering *lingers;
	size_t nlinger;
	/* Addresses whose connections proved trust_header lately: new ones
	 * from there are not held to conn_per_client at the door (a burst
	 * of a replica's forwarded requests), until TRUST_MS after the last
	 * proof.  Under mu. */
	struct {
		uint32_t ip;
		int64_t until_ms;
	} trusted[TRUST_MAX];
	/* Event mode (cfg.quick; see "Event mode" below), under wmu. */
	bool events;
	pthread_mutex_t wmu;
	pthread_cond_t wcv;   /* work queued, or stopping */
	pthread_cond_t quiet; /* parked, workers or pumps fell to 0 */
	struct conn_state *wq_head, *wq_tail;
	unsigned nqueued;     /* in the queue */
	unsigned idle;        /* workers waiting for work */
	unsigned workers;     /* worker threads alive */
	unsigned parked;      /* connections held: at work or waiting */
	unsigned pumps;       /* streamed answers' reading threads alive */
	struct pump *sending; /* the pumps whose answer is being sent */
	bool stopping;        /* nothing more is held or pumped */
	bool wstop;
};

/* Per-request state kept by libmicrohttpd between calls (made by
 * on_uri, before the first call). */
struct conn_state {
	struct cnl_http_server *srv;
	bool started; /* the access handler has seen the headers */
	char *uri;    /* the request target as sent */
	char *body;
	size_t len;
	size_t cap;
	bool too_large;
	struct cnl_http_sink *sink; /* a CNL_HTTP_STREAM_IN route's */
	/* A passed request (pass_prefix): its state, NULL once refused. */
	bool passed, pass_drop;
	void *pass;
	/* A 101 queued and not yet handed over (see on_upgraded). */
	void (*upgraded)(void *arg, int fd, const char *extra, size_t n,
	                 struct cnl_http_upgrade *u);
	void (*upgrade_free)(void *arg);
	void *upgrade_arg;
	bool answered; /* an answer was queued */
	/* A held connection (see "Event mode"): why, and its answer. */
	uint8_t park;
	int wake_r; /* cnl_http_wake()'s verdict */
	struct MHD_Connection *conn;
	const struct cnl_http_route *route;
	void *pass_st;
	struct cnl_http_request req;
	struct cnl_http_response resp;
	struct conn_state *wnext; /* in the work queue */
};

enum park { PARK_NONE, PARK_WAIT, PARK_SERVE, PARK_PASS };

static const char *const perm_names[CNL_PERM_COUNT_] = {
    [CNL_PERM_UNSET] = "UNSET",
    [CNL_PERM_PUBLIC] = "PUBLIC",
    [CNL_PERM_AUTHENTICATED] = "AUTHENTICATED",
    [CNL_PERM_PROJECT_VIEW] = "PROJECT_VIEW",
    [CNL_PERM_PROJECT_MEMBER] = "PROJECT_MEMBER",
    [CNL_PERM_PROJECT_ADMIN] = "PROJECT_ADMIN",
    [CNL_PERM_ADMIN] = "ADMIN",
    [CNL_PERM_AGENT] = "AGENT",
    [CNL_PERM_COLLECT] = "COLLECT",
};

const char *cnl_http_perm_name(enum cnl_http_perm p)
{
	if ((int)p < 0 || p >= CNL_PERM_COUNT_)
		return "INVALID";
	return perm_names[p];
}

static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};

static bool known_method(const char *m)
{
	for (size_t i = 0; i < CNL_ARRAY_SIZE(methods); i++)
		if (m && strcmp(m, methods[i]) == 0)
			return true;
	return false;
}

__attribute__((format(printf, 3, 4))) static int
config_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -CNL_ECONFIG;
}

/* ------------------------------------------------------------------------ */
/* Framing                                                                   */
/* ------------------------------------------------------------------------ */

/* Whether @c may be in a field name (RFC 9110 5.6.2, tchar). */
static bool tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	       (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Note @name as a field HTTP does not allow (the first one is named). */
static void bad_field(struct cnl_http_framing *f, const char *name)
{
	size_t i;

	if (f->bad_field)
		return;
	f->bad_field = true;
	for (i = 0; name[i] && i + 1 < sizeof(f->field); i++)
		f->field[i] = name[i] > 0x20 && name[i] < 0x7f ? name[i] : '?';
	f->field[i] = '\0';
}

void cnl_http_framing_add(struct cnl_http_framing *f, const char *name,
                          const char *value)
{
	bool bad = !name || !name[0];

	if (!name)
		return;
	if (!value)
		value = "";
	for (const char *p = name; *p; p++)
		bad |= !tchar((unsigned char)*p);
	for (const char *p = value; *p; p++)
		bad |= ((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f;
	/* A folded line glued to the name (see http_server.h). */
	bad |= strcasestr(name, "Content-Length") &&
	       strcasecmp(name, "Content-Length") != 0;
	bad |= strcasestr(name, "Transfer-Encoding") &&
	       strcasecmp(name, "Transfer-Encoding") != 0;
	if (bad)
		bad_field(f, name);
	if (strcasecmp(name, "Host") == 0)
		f->n_host++;
	if (strcasecmp(name, "Content-Length") == 0) {
		uint64_t v = 0;
		const char *p = value;

		if (f->n_length++ > 0)
			return; /* refused at the end whatever its value */
		if (*p < '0' || *p > '9')
			f->bad_length = true;
		for (; *p >= '0' && *p <= '9'; p++) {
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, (uint64_t)(*p - '0'),
			                           &v)) {
				f->length_overflow = true;
				break;
			}
		}
		if (*p && !f->length_overflow)
			f->bad_length = true;
		f->length = v;
	} else if (strcasecmp(name, "Transfer-Encoding") == 0) {
		f->n_encoding++;
		if (strcasecmp(value, "chunked") != 0)
			f->bad_encoding = true;
	}
}

int cnl_http_framing_end(const struct cnl_http_framing *f, int64_t *ret_length,
                         char *err, size_t errlen)
{
	const char *why = NULL;

	if (f->bad_field) {
		if (err && errlen)
			snprintf(err, errlen,
			         "header \"%s\": a name with a space or "
			         "another character a name cannot hold, a "
			         "folded line, or a control character in the "
			         "value",
			         f->field);
		return -EINVAL;
	} else if (f->n_host > 1)
		why = "more than one Host header";
	else if (f->n_length > 1)
		why = "more than one Content-Length header";
	else if (f->n_length && f->n_encoding)
		why = "Content-Length together with Transfer-Encoding";
	else if (f->n_encoding > 1)
		why = "more than one Transfer-Encoding header";
	else if (f->bad_encoding)
		why = "Transfer-Encoding other than chunked";
	else if (f->bad_length)
		why = "Content-Length is not a decimal number";
	else if (f->length_overflow || f->length > (uint64_t)INT64_MAX)
		why = "Content-Length is too large";
	if (why) {
		if (err && errlen)
			snprintf(err, errlen, "%s", why);
		return -EINVAL;
	}
	if (ret_length)
		*ret_length = f->n_length ? (int64_t)f->length : -1;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Connection table (the acceptor's, see the top of the file)                */
/* ------------------------------------------------------------------------ */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int conn_fd(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	return ci ? ci->connect_fd : -1;
}

/* The row of @ip, or with @add a free row for it; NULL. Under mu. */
static struct peer *peer_find(struct cnl_http_server *srv, uint32_t ip,
                              bool add)
{
	struct peer *free_row = NULL;

	for (unsigned i = 0; i < srv->cfg.conn_max; i++) {
		struct peer *p = &srv->peers[i];

		if (p->n && p->ip == ip)
			return p;
		if (!p->n && !free_row)
			free_row = p;
	}
	if (!add || !free_row)
		return NULL;
	free_row->ip = ip;
	return free_row;
}

/* Forget the connection at @fd, if the table has it. Under mu. */
static void track_release(struct cnl_http_server *srv, int fd)
{
	struct track *t;
	struct peer *p;

	if (fd < 0 || fd >= srv->ntrack || !srv->track[fd].used)
		return;
	t = &srv->track[fd];
	if (t->over) {
		srv->over--;
	} else {
		srv->open--;
		if (!t->uncounted && (p = peer_find(srv, t->ip, false)))
			p->n--;
	}
	memset(t, 0, sizeof(*t));
}

/* @t stops counting toward its address's limit.  Under mu. */
static void uncount(struct cnl_http_server *srv, struct track *t)
{
	struct peer *p;

	if (t->over || t->uncounted)
		return;
	if ((p = peer_find(srv, t->ip, false)))
		p->n--;
	t->uncounted = true;
}

/* Move @conn to @phase (again: a body's progress), unless it was handed
 * over or cut; returns whether it is an over-the-limit one (TLS). */
static bool track_phase(struct cnl_http_server *srv,
                        struct MHD_Connection *conn, enum phase phase)
{
	int fd = srv && srv->track ? conn_fd(conn) : -1;
	bool over = false;
	struct track *t;

	if (fd < 0)
		return false;
	pthread_mutex_lock(&srv->mu);
	if (fd < srv->ntrack && srv->track[fd].used) {
		t = &srv->track[fd];
		over = t->over;
		if (t->phase != PH_UPGRADED && t->phase != PH_CUT) {
			t->phase = (uint8_t)phase;
			t->since_ms = mono_ms();
		}
		if (phase == PH_UPGRADED)
			uncount(srv, t);
	}
	pthread_mutex_unlock(&srv->mu);
	return over;
}

/* Whether @ip proved trust_header within TRUST_MS.  Under mu. */
static bool ip_trusted(struct cnl_http_server *srv, uint32_t ip, int64_t now)
{
	for (size_t i = 0; i < TRUST_MAX; i++)
		if (srv->trusted[i].ip == ip && srv->trusted[i].until_ms > now)
			return true;
	return false;
}

/* @conn no longer counts toward its address's limit, and its address is
 * trusted at the door for TRUST_MS (trust_header). */
static void track_trusted(struct cnl_http_server *srv,
                          struct MHD_Connection *conn)
{
	int fd = srv && srv->track ? conn_fd(conn) : -1;
	int64_t now = mono_ms();
	size_t slot = 0;
	uint32_t ip;

	if (fd < 0)
		return;
	pthread_mutex_lock(&srv->mu);
	if (fd < srv->ntrack && srv->track[fd].used) {
		uncount(srv, &srv->track[fd]);
		ip = srv->track[fd].ip;
		/* Its row, else the one that ran out first. */
		for (size_t i = 0; i < TRUST_MAX; i++) {
			if (srv->trusted[i].ip == ip) {
				slot = i;
				break;
			}
			if (srv->trusted[i].until_ms <
			    srv->trusted[slot].until_ms)
				slot = i;
		}
		srv->trusted[slot].ip = ip;
		srv->trusted[slot].until_ms = now + TRUST_MS;
	}
	pthread_mutex_unlock(&srv->mu);
}

/* libmicrohttpd's notice of a connection's start and end: the end frees
 * its row, before the descriptor is closed. */
static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
	struct cnl_http_server *srv = cls;

	(void)socket_context;
	if (toe != MHD_CONNECTION_NOTIFY_CLOSED)
		return;
	pthread_mutex_lock(&srv->mu);
	track_release(srv, conn_fd(conn));
	pthread_mutex_unlock(&srv->mu);
}

/* Cut the connections late with their head or body. */
static void watchdog(struct cnl_http_server *srv, int64_t now)
{
	pthread_mutex_lock(&srv->mu);
	for (int fd = 0; fd <= srv->maxfd && fd < srv->ntrack; fd++) {
		struct track *t = &srv->track[fd];
		int64_t limit;

		if (!t->used)
			continue;
		if (t->phase == PH_HEAD)
			limit = srv->cfg.header_timeout_ms;
		else if (t->phase == PH_BODY)
			limit = srv->cfg.body_timeout_ms;
		else
			continue;
		if (now - t->since_ms < limit)
			continue;
		if (t->phase == PH_HEAD)
			srv->stats.header_cut++;
		else
			srv->stats.body_cut++;
		t->phase = PH_CUT;
		shutdown(fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&srv->mu);
}

/* Answer a refused connection (@why: 0 global limit, 1 client's cap). */
static void refuse(struct cnl_http_server *srv, int fd, int why, int64_t now)
{
	ssize_t w;

	if (srv->tls) {
		close(fd); /* no reply without a handshake: see admit() */
		return;
	}
	w = write(fd, srv->busy[why], srv->busy_len[why]);
	(void)w; /* a fresh socket's buffer holds it; else the client left */
	shutdown(fd, SHUT_WR);
	if (srv->nlinger == LINGER_MAX) {
		close(srv->lingers[0].fd);
		srv->lingers[0] = srv->lingers[--srv->nlinger];
	}
	srv->lingers[srv->nlinger++] = (struct lingering){fd, now + LINGER_MS};
}

/* Admit @fd, from @sa, or refuse it. */
static void admit(struct cnl_http_server *srv, int fd,
                  const struct sockaddr_in *sa, int64_t now)
{
	uint32_t ip = sa->sin_addr.s_addr;
	struct peer *p = NULL;
	int why = -1;

	pthread_mutex_lock(&srv->mu);
	if (fd >= srv->ntrack || srv->open >= srv->cfg.conn_max)
		why = 0;
	else if ((p = peer_find(srv, ip, true)) &&
	         p->n >= srv->cfg.conn_per_client && !ip_trusted(srv, ip, now))
		why = 1;
	if (why < 0) {
		srv->track[fd] = (struct track){
		    .used = true, .phase = PH_HEAD, .ip = ip, .since_ms = now};
		srv->open++;
		p->n++;
	} else if (srv->tls && fd < srv->ntrack &&
	           srv->over < srv->cfg.conn_max) {
		/* Over TLS a 503 needs the handshake: libmicrohttpd makes it
		 * and on_request answers (under the header timeout). */
		srv->track[fd] = (struct track){.used = true,
		                                .over = true,
		                                .phase = PH_HEAD,
		                                .ip = ip,
		                                .since_ms = now};
		srv->over++;
		why = -1;
	}
	if (why < 0 && fd > srv->maxfd)
		srv->maxfd = fd;
	if (why < 0)
		srv->stats.accepted++;
	else
		srv->stats.refused++;
	pthread_mutex_unlock(&srv->mu);
	if (why >= 0) {
		refuse(srv, fd, why, now);
		return;
	}
	/* On failure libmicrohttpd has closed the socket; the row may have
	 * gone already through on_connection, and only this thread makes
	 * rows, so none can be there for another connection. */
	if (MHD_add_connection(srv->daemon, fd, (const struct sockaddr *)sa,
	                       sizeof(*sa)) != MHD_YES) {
		pthread_mutex_lock(&srv->mu);
		track_release(srv, fd);
		pthread_mutex_unlock(&srv->mu);
	}
}

/* Accept what is waiting; *@pause_until is set when out of descriptors. */
static void accept_some(struct cnl_http_server *srv, int64_t now,
                        int64_t *pause_until)
{
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		struct sockaddr_in sa;
		socklen_t len = sizeof(sa);
		int fd = accept4(srv->lfd, (struct sockaddr *)&sa, &len,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				*pause_until = now + TICK_MS;
			return;
		}
		if (len < sizeof(sa) || sa.sin_family != AF_INET) {
			close(fd);
			continue;
		}
		admit(srv, fd, &sa, now);
	}
}

/* Read and drop what refused clients send; close those done or late. */
static void linger_run(struct cnl_http_server *srv, const struct pollfd *pf,
                       int64_t now)
{
	for (size_t i = srv->nlinger; i-- > 0;) {
		bool done = now >= srv->lingers[i].until_ms;

		if (pf[i].revents) {
			char buf[4096];
			ssize_t r = read(srv->lingers[i].fd, buf, sizeof(buf));

			if (r == 0 ||
			    (r < 0 && errno != EAGAIN && errno != EINTR))
				done = true;
		}
		if (done) {
			close(srv->lingers[i].fd);
			srv->lingers[i] = srv->lingers[--srv->nlinger];
		}
	}
}

static void *acceptor_main(void *arg)
{
	struct cnl_http_server *srv = arg;
	struct pollfd *pf = cnl_xcalloc(2 + LINGER_MAX, sizeof(*pf));
	int64_t pause_until = 0;

	for (;;) {
		int64_t now = mono_ms();
		size_t n = srv->nlinger;

		pf[0] = (struct pollfd){srv->wake[0], POLLIN, 0};
		pf[1] = (struct pollfd){now >= pause_until ? srv->lfd : -1,
		                        POLLIN, 0};
		for (size_t i = 0; i < n; i++)
			pf[2 + i] =
			    (struct pollfd){srv->lingers[i].fd, POLLIN, 0};
		if (poll(pf, 2 + n, TICK_MS) < 0 && errno != EINTR)
			continue;
		if (pf[0].revents)
			break;
		now = mono_ms();
		linger_run(srv, pf + 2, now);
		if (pf[1].revents & POLLIN)
			accept_some(srv, now, &pause_until);
		watchdog(srv, now);
	}
	free(pf);
	return NULL;
}

void cnl_http_server_stats(struct cnl_http_server *srv,
                           struct cnl_http_server_stats *ret)
{
	pthread_mutex_lock(&srv->mu);
	*ret = srv->stats;
	ret->open = srv->open;
	pthread_mutex_unlock(&srv->mu);
}

/* The ready-made 503 saying @msg. */
static char *busy_reply(unsigned retry_after, const char *msg, size_t *ret_len)
{
	json_t *b = cnl_http_error_body("overloaded", msg);
	char *body = b ? cnl_json_dumps_compact(b) : NULL;
	char *out = NULL;
	int n;

	json_decref(b);
	if (!body)
		abort(); /* out of memory, as cnl_xmalloc */
	n = asprintf(&out,
	             "HTTP/1.1 503 Service Unavailable\r\n"
	             "Content-Type: application/json\r\n"
	             "Cache-Control: no-store\r\n"
	             "Retry-After: %u\r\n"
	             "Connection: close\r\n"
	             "Content-Length: %zu\r\n"
	             "\r\n"
	             "%s",
	             retry_after, strlen(body), body);
	free(body);
	if (n < 0)
		abort();
	*ret_len = (size_t)n;
	return out;
}

/*
 * Check one pattern: starts with '/', no empty segment, and each segment is
 * either literal (no braces) or a whole {name} of [a-z_].  Returns the
 * number of parameters, or -1.
 */
static int pattern_params(const char *pat)
{
	int n = 0;

	if (!pat || pat[0] != '/')
		return -1;
	for (const char *s = pat + 1;;) {
		const char *end = strchr(s, '/');
		size_t len = end ? (size_t)(end - s) : strlen(s);

		if (len == 0 && end)
			return -1; /* empty segment; a trailing "/" is fine */
		if (len && s[0] == '{') {
			if (len < 3 || len > 30 || s[len - 1] != '}')
				return -1;
			for (size_t i = 1; i + 1 < len; i++)
				if (!((s[i] >= 'a' && s[i] <= 'z') ||
				      s[i] == '_'))
					return -1;
			n++;
		} else if (memchr(s, '{', len) || memchr(s, '}', len)) {
			return -1;
		}
		if (!end)
			break;
		s = end + 1;
	}
	return n <= CNL_HTTP_PARAMS_MAX ? n : -1;
}

int cnl_http_routes_check(const struct cnl_http_route *routes, size_t n,
                          char *err, size_t errlen)
{
	if (!routes || n == 0)
		return config_err(err, errlen, "route table is empty");
	for (size_t i = 0; i < n; i++) {
		const struct cnl_http_route *r = &routes[i];
		const char *pat = r->pattern ? r->pattern : "(null)";

		if (!known_method(r->method))
			return config_err(err, errlen,
			                  "route %zu (%s): unknown method", i,
			                  pat);
		if (pattern_params(r->pattern) < 0)
			return config_err(
			    err, errlen, "route %zu (%s %s): malformed pattern",
			    i, r->method, pat);
		if (r->perm == CNL_PERM_UNSET || (int)r->perm < 0 ||
		    r->perm >= CNL_PERM_COUNT_)
			return config_err(
			    err, errlen, "route %zu (%s %s): no permission set",
			    i, r->method, pat);
		if (!r->handler)
			return config_err(err, errlen,
			                  "route %zu (%s %s): no handler", i,
			                  r->method, pat);
		if (strcmp(r->method, "GET") != 0 &&
		    (!r->action || !r->action[0]))
			return config_err(err, errlen,
			                  "route %zu (%s %s): state-changing "
			                  "route without an audit action",
			                  i, r->method, pat);
		for (size_t j = 0; j < i; j++)
			if (strcmp(routes[j].method, r->method) == 0 &&
			    strcmp(routes[j].pattern, r->pattern) == 0)
				return config_err(
				    err, errlen,
				    "route %zu (%s %s): duplicate "
				    "of route %zu",
				    i, r->method, pat, j);
	}
	return 0;
}

/* Match @path against @pat, filling @req's params when @req is not NULL. */
static bool path_match(const char *pat, const char *path,
                       struct cnl_http_request *req)
{
	int np = 0;

	if (req)
		req->nparams = 0;
	while (*pat && *path) {
		if (*pat == '{') {
			const char *pe = strchr(pat, '}');
			const char *se = strchr(path, '/');
			size_t vlen = se ? (size_t)(se - path) : strlen(path);
			size_t nlen = (size_t)(pe - pat - 1);

			if (vlen == 0 || vlen >= sizeof(req->params[0].value))
				return false;
			if (req) {
				struct cnl_http_param *p = &req->params[np];

				memcpy(p->name, pat + 1, nlen);
				p->name[nlen] = '\0';
				memcpy(p->value, path, vlen);
				p->value[vlen] = '\0';
			}
			np++;
			pat = pe + 1;
			path += vlen;
			continue;
		}
		if (*pat != *path)
			return false;
		pat++;
		path++;
	}
	if (*pat || *path)
		return false;
	if (req)
		req->nparams = np;
	return true;
}

enum cnl_http_match
cnl_http_route_match(const struct cnl_http_route *routes, size_t n,
                     const char *method, const char *path,
                     struct cnl_http_request *req,
                     const struct cnl_http_route **ret_route, char *allow)
{
	bool path_seen = false;
	size_t used = 0;

	allow[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (!path_match(routes[i].pattern, path, NULL))
			continue;
		path_seen = true;
		if (strcmp(routes[i].method, method) == 0) {
			path_match(routes[i].pattern, path, req);
			*ret_route = &routes[i];
			return CNL_HTTP_MATCH_OK;
		}
		/* Methods are short and few, so the list always fits. */
		used += (size_t)snprintf(allow + used,
		                         CNL_HTTP_ALLOW_MAX - used, "%s%s",
		                         used ? ", " : "", routes[i].method);
		if (used >= CNL_HTTP_ALLOW_MAX)
			used = CNL_HTTP_ALLOW_MAX - 1;
	}
	return path_seen ? CNL_HTTP_MATCH_NO_METHOD : CNL_HTTP_MATCH_NO_PATH;
}

const char *cnl_http_param(const struct cnl_http_request *req, const char *name)
{
	for (int i = 0; i < req->nparams; i++)
		if (strcmp(req->params[i].name, name) == 0)
			return req->params[i].value;
	return NULL;
}

const char *cnl_http_header(const struct cnl_http_request *req,
                            const char *name)
{
	if (!req->conn)
		return NULL;
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

struct each_ctx {
	void (*fn)(void *arg, const char *name, const char *value);
	void *arg;
};

static enum MHD_Result each_header(void *cls, enum MHD_ValueKind kind,
                                   const char *key, const char *value)
{
	struct each_ctx *e = cls;

	e->fn(e->arg, key, value ? value : "");
	return MHD_YES;
}

void cnl_http_headers_each(const struct cnl_http_request *req,
                           void (*fn)(void *arg, const char *name,
                                      const char *value),
                           void *arg)
{
	struct each_ctx e = {fn, arg};

	if (req->conn)
		MHD_get_connection_values(req->conn, MHD_HEADER_KIND,
		                          each_header, &e);
}

void cnl_http_upgrade_close(struct cnl_http_upgrade *u)
{
	if (u)
		MHD_upgrade_action((struct MHD_UpgradeResponseHandle *)u,
		                   MHD_UPGRADE_ACTION_CLOSE);
}

/* libmicrohttpd calls this once the 101 went out: the byte stream is the
 * layer above's from here. */
static void on_upgraded(void *cls, struct MHD_Connection *conn, void *con_cls,
                        const char *extra, size_t n, MHD_socket sock,
                        struct MHD_UpgradeResponseHandle *urh)
{
	struct conn_state *cs = cls;
	void (*fn)(void *, int, const char *, size_t,
	           struct cnl_http_upgrade *) = cs->upgraded;
	void *arg = cs->upgrade_arg;

	cs->upgraded = NULL;
	cs->upgrade_free = NULL;
	cs->upgrade_arg = NULL;
	track_phase(cs->srv, conn, PH_UPGRADED);
	if (fn)
		fn(arg, sock, extra, n, (struct cnl_http_upgrade *)urh);
	else
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct cnl_http_response *r = cls;
	ssize_t n = r->stream_read(r->stream_arg, buf, max);

	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

static void stream_done(void *cls)
{
	struct cnl_http_response *r = cls;

	if (r->stream_free)
		r->stream_free(r->stream_arg);
	free(r);
}

/* Add the "Name: value\r\n" lines of @lines to @r. */
static void add_headers(struct MHD_Response *r, const char *lines)
{
	while (lines && *lines) {
		const char *eol = strstr(lines, "\r\n");
		size_t len = eol ? (size_t)(eol - lines) : strlen(lines);
		const char *colon = memchr(lines, ':', len);

		if (colon && colon > lines) {
			char *name = strndup(lines, (size_t)(colon - lines));
			const char *v = colon + 1;
			char *value;

			while (v < lines + len && (*v == ' ' || *v == '\t'))
				v++;
			value = strndup(v, (size_t)(lines + len - v));
			if (name && value)
				MHD_add_response_header(r, name, value);
			free(name);
			free(value);
		}
		lines += len + (eol ? 2 : 0);
	}
}

const char *cnl_http_query(const struct cnl_http_request *req, const char *name)
{
	const char *v = NULL;
	size_t len = 0;

	if (!req->conn ||
	    MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND,
	                                  name, strlen(name), &v,
	                                  &len) != MHD_YES ||
	    !v)
		return NULL;
	/* A %00 in the value would cut it short where C reads it: such a
	 * value is no value. */
	return strlen(v) == len ? v : NULL;
}

void cnl_http_reply(struct cnl_http_response *resp, unsigned status,
                    json_t *body)
{
	json_decref(resp->body);
	resp->status = status;
	resp->body = body;
}

void cnl_http_error(struct cnl_http_response *resp, unsigned status,
                    const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cnl_http_reply(resp, status, cnl_http_error_body(code, msg));
}

static struct MHD_Response *pump_response(struct cnl_http_server *srv,
                                          struct MHD_Connection *conn,
                                          struct cnl_http_response *resp);

/* Send @resp on @conn (whose state is @cs, NULL when it has none) and
 * release its body. */
static enum MHD_Result send_response(struct MHD_Connection *conn,
                                     struct conn_state *cs,
                                     struct cnl_http_response *resp)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	char *text = NULL;
	size_t text_len = 0;

	if (resp->upgraded && (resp->status != 101 || !cs)) {
		if (resp->upgrade_free)
			resp->upgrade_free(resp->upgrade_arg);
		resp->upgraded = NULL;
		if (resp->status == 101)
			resp->status = 0;
	}
	if (resp->status == 0) {
		cnl_http_error(resp, 500, "internal",
		               "the handler produced no response");
	}
	if (resp->upgraded) {
		r = MHD_create_response_for_upgrade(on_upgraded, cs);
		json_decref(resp->body);
		resp->body = NULL;
		free(resp->text);
		resp->text = NULL;
		if (!r) {
			if (resp->upgrade_free)
				resp->upgrade_free(resp->upgrade_arg);
			free(resp->headers);
			return MHD_NO;
		}
		cs->upgraded = resp->upgraded;
		cs->upgrade_free = resp->upgrade_free;
		cs->upgrade_arg = resp->upgrade_arg;
		resp->no_defaults = true;
		goto headers;
	}
	if (resp->stream_read && cs && cs->srv->events) {
		r = pump_response(cs->srv, conn, resp);
		json_decref(resp->body);
		resp->body = NULL;
		if (!r) {
			free(resp->headers);
			return MHD_NO;
		}
		goto headers;
	}
	if (resp->stream_read) {
		/* The reader's state outlives this call: a copy goes with
		 * the response and is freed with it. */
		struct cnl_http_response *copy = cnl_xmalloc(sizeof(*copy));

		*copy = *resp;
		r = MHD_create_response_from_callback(
		    resp->stream_size < 0 ? MHD_SIZE_UNKNOWN
		                          : (uint64_t)resp->stream_size,
		    64 * 1024, stream_reader, copy, stream_done);
		json_decref(resp->body);
		resp->body = NULL;
		if (!r) {
			stream_done(copy);
			free(resp->headers);
			return MHD_NO;
		}
		goto headers;
	}
	if (resp->send_file) {
		/* libmicrohttpd owns the descriptor from here (closed with
		 * the response), and reads it as it sends. */
		r = MHD_create_response_from_fd64(resp->file_size,
		                                  resp->file_fd);
		resp->send_file = false;
		json_decref(resp->body);
		resp->body = NULL;
		free(resp->text);
		resp->text = NULL;
		if (!r) {
			close(resp->file_fd);
			return MHD_NO;
		}
		goto headers;
	}
	if (resp->text) {
		text = resp->text; /* sent as the handler wrote it */
		text_len = resp->text_len;
		resp->text = NULL;
		json_decref(resp->body);
		resp->body = NULL;
	} else if (resp->body) {
		text = cnl_json_dumps_compact(resp->body);
	}
	if (resp->body && !text) {
		json_decref(resp->body);
		resp->body = NULL;
		return MHD_NO; /* out of memory: drop the connection */
	}
	r = MHD_create_response_from_buffer(text_len ? text_len
	                                    : text   ? strlen(text)
	                                             : 0,
	                                    text ? text : (char *)"",
	                                    MHD_RESPMEM_MUST_COPY);
	free(text);
	json_decref(resp->body);
	resp->body = NULL;
	if (!r)
		return MHD_NO;
headers:
	add_headers(r, resp->headers);
	free(resp->headers);
	resp->headers = NULL;
	if (resp->sha256[0])
		MHD_add_response_header(r, "X-Content-SHA256", resp->sha256);
	if (!resp->no_defaults) {
		MHD_add_response_header(r, "Content-Type",
		                        resp->content_type
		                            ? resp->content_type
		                            : "application/json");
		MHD_add_response_header(r, "Cache-Control", "no-store");
	}
	if (resp->allow[0])
		MHD_add_response_header(r, "Allow", resp->allow);
	ret = MHD_queue_response(conn, resp->status, r);
	MHD_destroy_response(r);
	if (cs)
		cs->answered = true;
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Event mode                                                                */
/* ------------------------------------------------------------------------ */

/*
 * With cfg.quick, a pool of event threads (libmicrohttpd's, over epoll)
 * carries every connection, and nothing may block them.  A request is
 * held (MHD_suspend_connection(): out of the event loop, no thread
 * waiting on it) and taken up again (MHD_resume_connection(), from any
 * thread; libmicrohttpd then calls the access handler once more, and the
 * answer kept in its state goes) in three cases:
 *
 *   PARK_WAIT   a quick route's answer waits for its event (resp.wait):
 *               cnl_http_wake() resumes it;
 *   PARK_SERVE, PARK_PASS
 *               any other route's serve(), or a passed request's
 *               pass_end(), runs on a worker thread, which resumes it.
 *
 * Workers are made as the queue needs them and end after WORKER_IDLE_MS
 * idle: a long poll keeps its worker as it kept its connection's thread.
 * A streamed answer (stream_read, which may block) is read by a pump
 * thread into a buffer that libmicrohttpd's content reader drains; an
 * empty buffer suspends the connection until the pump brings more.
 *
 * Shutdown waits for every held connection to be answered (the layer
 * above ended its long polls first), stops libmicrohttpd, then waits for
 * the workers and the pumps, which no longer touch a connection.
 */
#define WORKER_IDLE_MS 10000
#define PUMP_BUF       (64 * 1024)

struct pump {
	struct cnl_http_server *srv;
	struct MHD_Connection *conn;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* room in the buffer, or gone */
	ssize_t (*read)(void *arg, char *buf, size_t max);
	void (*free)(void *arg);
	void *arg;
	char buf[PUMP_BUF];
	size_t off, len; /* what is in buf, not yet sent */
	bool end, err;
	bool suspended; /* the content reader found buf empty */
	bool gone;      /* libmicrohttpd freed the response */
	int refs;
	struct pump *prev, *next; /* in srv->sending, under srv->wmu */
};

static void pump_unref(struct pump *p)
{
	bool last;

	pthread_mutex_lock(&p->mu);
	last = --p->refs == 0;
	pthread_mutex_unlock(&p->mu);
	if (!last)
		return;
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/* A pump of @srv's is done. */
static void pumps_less(struct cnl_http_server *srv)
{
	pthread_mutex_lock(&srv->wmu);
	if (--srv->pumps == 0)
		pthread_cond_broadcast(&srv->quiet);
	pthread_mutex_unlock(&srv->wmu);
}

static void *pump_main(void *arg)
{
	struct pump *p = arg;
	struct cnl_http_server *srv = p->srv;
	char *tmp = cnl_xmalloc(PUMP_BUF);

	for (;;) {
		size_t room;
		ssize_t n;
		bool done;

		pthread_mutex_lock(&p->mu);
		while (!p->gone && p->off + p->len == PUMP_BUF && p->off == 0)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->gone) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		if (p->off) {
			memmove(p->buf, p->buf + p->off, p->len);
			p->off = 0;
		}
		/* The reader only moves off forward with len back: the room
		 * past off + len stays this pump's. */
		room = PUMP_BUF - p->len;
		pthread_mutex_unlock(&p->mu);
		n = p->read(p->arg, tmp, room);
		pthread_mutex_lock(&p->mu);
		if (n > 0) {
			memcpy(p->buf + p->off + p->len, tmp, (size_t)n);
			p->len += (size_t)n;
		} else if (n == 0) {
			p->end = true;
		} else {
			p->err = true;
		}
		if (p->suspended && !p->gone) {
			p->suspended = false;
			MHD_resume_connection(p->conn);
		}
		done = p->end || p->err || p->gone;
		pthread_mutex_unlock(&p->mu);
		if (done)
			break;
	}
	free(tmp);
	if (p->free)
		p->free(p->arg);
	pump_unref(p);
	pumps_less(srv);
	return NULL;
}

static ssize_t pump_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct pump *p = cls;
	ssize_t n;

	(void)pos;
	pthread_mutex_lock(&p->mu);
	if (p->len) {
		size_t k = p->len < max ? p->len : max;

		memcpy(buf, p->buf + p->off, k);
		p->off += k;
		p->len -= k;
		pthread_cond_signal(&p->cv);
		n = (ssize_t)k;
	} else if (p->err) {
		n = MHD_CONTENT_READER_END_WITH_ERROR;
	} else if (p->end) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else {
		/* Nothing yet: out of the loop until the pump brings more
		 * (libmicrohttpd calls again once resumed). */
		p->suspended = true;
		MHD_suspend_connection(p->conn);
		n = 0;
	}
	pthread_mutex_unlock(&p->mu);
	return n;
}

static void pump_gone(void *cls)
{
	struct pump *p = cls;
	struct cnl_http_server *srv = p->srv;

	pthread_mutex_lock(&p->mu);
	p->gone = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_lock(&srv->wmu);
	if (p->prev)
		p->prev->next = p->next;
	else
		srv->sending = p->next;
	if (p->next)
		p->next->prev = p->prev;
	pthread_mutex_unlock(&srv->wmu);
	pump_unref(p);
}

/* Stopping: every streamed answer ends (an error: it was cut), and the
 * ones waiting for their pump are resumed, since libmicrohttpd stops only
 * without suspended connections. */
static void pumps_cut(struct cnl_http_server *srv)
{
	pthread_mutex_lock(&srv->wmu);
	for (struct pump *p = srv->sending; p; p = p->next) {
		pthread_mutex_lock(&p->mu);
		p->err = true;
		if (p->suspended && !p->gone) {
			p->suspended = false;
			MHD_resume_connection(p->conn);
		}
		pthread_mutex_unlock(&p->mu);
	}
	pthread_mutex_unlock(&srv->wmu);
}

/* A response read by a pump thread from @resp's stream (whose reader
 * it now owns); NULL, with the stream freed, when none can be made. */
static struct MHD_Response *pump_response(struct cnl_http_server *srv,
                                          struct MHD_Connection *conn,
                                          struct cnl_http_response *resp)
{
	struct pump *p;
	struct MHD_Response *r;
	pthread_attr_t at;
	pthread_t t;
	int e;

	pthread_mutex_lock(&srv->wmu);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->wmu);
		if (resp->stream_free)
			resp->stream_free(resp->stream_arg);
		resp->stream_read = NULL;
		resp->stream_free = NULL;
		return NULL;
	}
	srv->pumps++;
	pthread_mutex_unlock(&srv->wmu);
	p = cnl_xcalloc(1, sizeof(*p));
	p->srv = srv;
	p->conn = conn;
	p->read = resp->stream_read;
	p->free = resp->stream_free;
	p->arg = resp->stream_arg;
	p->refs = 2; /* the pump's and the response's */
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	resp->stream_read = NULL;
	resp->stream_free = NULL;
	r = MHD_create_response_from_callback(
	    resp->stream_size < 0 ? MHD_SIZE_UNKNOWN
	                          : (uint64_t)resp->stream_size,
	    PUMP_BUF, pump_reader, p, pump_gone);
	if (!r) {
		if (p->free)
			p->free(p->arg);
		p->refs = 1;
		pump_unref(p);
		pumps_less(srv);
		return NULL;
	}
	pthread_mutex_lock(&srv->wmu);
	p->next = srv->sending;
	if (p->next)
		p->next->prev = p;
	srv->sending = p;
	pthread_mutex_unlock(&srv->wmu);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	e = pthread_create(&t, &at, pump_main, p);
	pthread_attr_destroy(&at);
	if (e != 0) {
		/* No thread to read it: the answer ends in an error. */
		pthread_mutex_lock(&p->mu);
		p->err = true;
		p->refs--;
		pthread_mutex_unlock(&p->mu);
		if (p->free)
			p->free(p->arg);
		pumps_less(srv);
	}
	return r;
}

/* Free what @resp holds, unsent. */
static void response_discard(struct cnl_http_response *resp)
{
	if (resp->upgraded && resp->upgrade_free)
		resp->upgrade_free(resp->upgrade_arg);
	if (resp->stream_read && resp->stream_free)
		resp->stream_free(resp->stream_arg);
	if (resp->send_file)
		close(resp->file_fd);
	free(resp->text);
	free(resp->headers);
	json_decref(resp->body);
	memset(resp, 0, sizeof(*resp));
}

/* A held connection is taken up again: one fewer to wait for. */
static void unparked(struct cnl_http_server *srv)
{
	pthread_mutex_lock(&srv->wmu);
	if (--srv->parked == 0)
		pthread_cond_broadcast(&srv->quiet);
	pthread_mutex_unlock(&srv->wmu);
}

void cnl_http_wake(void *waiter, int r)
{
	struct conn_state *cs = waiter;
	struct cnl_http_server *srv = cs->srv;

	cs->wake_r = r;
	/* From here libmicrohttpd may answer and free @cs. */
	MHD_resume_connection(cs->conn);
	unparked(srv);
}

/* Hold @conn (whose answer is @cs->resp or to be made) as @how; false
 * when the server is stopping (nothing is held then). */
static bool park(struct cnl_http_server *srv, struct MHD_Connection *conn,
                 struct conn_state *cs, enum park how)
{
	bool stopping;

	pthread_mutex_lock(&srv->wmu);
	stopping = srv->stopping;
	if (!stopping)
		srv->parked++;
	pthread_mutex_unlock(&srv->wmu);
	if (stopping)
		return false;
	cs->conn = conn;
	cs->park = (uint8_t)how;
	cs->wake_r = 0;
	MHD_suspend_connection(conn);
	return true;
}

/* The answer of a request that came while the server stops. */
static enum MHD_Result answer_stopping(struct MHD_Connection *conn,
                                       struct conn_state *cs,
                                       struct cnl_http_response *resp)
{
	cnl_http_error(resp, 503, "unavailable", "the server is stopping");
	return send_response(conn, cs, resp);
}

static void work_run(struct cnl_http_server *srv, struct conn_state *cs)
{
	if (cs->park == PARK_PASS)
		srv->cfg.pass_end(cs->pass_st, &cs->req, &cs->resp);
	else
		srv->cfg.serve(srv->cfg.ud, cs->route, &cs->req, &cs->resp);
	cnl_http_wake(cs, 0);
}

static void *worker_main(void *arg)
{
	struct cnl_http_server *srv = arg;
	struct timespec ts;

	pthread_mutex_lock(&srv->wmu);
	for (;;) {
		struct conn_state *cs = srv->wq_head;

		if (!cs) {
			int e;

			if (srv->wstop)
				break;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += WORKER_IDLE_MS / 1000;
			srv->idle++;
			e = pthread_cond_timedwait(&srv->wcv, &srv->wmu, &ts);
			srv->idle--;
			if (e == ETIMEDOUT && !srv->wq_head)
				break;
			continue;
		}
		srv->wq_head = cs->wnext;
		if (!srv->wq_head)
			srv->wq_tail = NULL;
		srv->nqueued--;
		pthread_mutex_unlock(&srv->wmu);
		work_run(srv, cs);
		pthread_mutex_lock(&srv->wmu);
	}
	if (--srv->workers == 0)
		pthread_cond_broadcast(&srv->quiet);
	pthread_mutex_unlock(&srv->wmu);
	return NULL;
}

/* Hold @conn and have a worker make its answer (@how: PARK_SERVE with
 * @cs->route and @cs->req, or PARK_PASS with @cs->pass_st). */
static enum MHD_Result park_work(struct cnl_http_server *srv,
                                 struct MHD_Connection *conn,
                                 struct conn_state *cs, enum park how)
{
	bool spawn;

	if (!park(srv, conn, cs, how)) {
		if (how == PARK_PASS)
			srv->cfg.pass_free(cs->pass_st);
		return answer_stopping(conn, cs, &cs->resp);
	}
	pthread_mutex_lock(&srv->wmu);
	cs->wnext = NULL;
	if (srv->wq_tail)
		srv->wq_tail->wnext = cs;
	else
		srv->wq_head = cs;
	srv->wq_tail = cs;
	srv->nqueued++;
	spawn = srv->idle < srv->nqueued;
	if (!spawn)
		pthread_cond_signal(&srv->wcv);
	else
		srv->workers++;
	pthread_mutex_unlock(&srv->wmu);
	if (spawn) {
		pthread_attr_t at;
		pthread_t t;
		int e;

		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		e = pthread_create(&t, &at, worker_main, srv);
		pthread_attr_destroy(&at);
		if (e != 0) {
			/* No thread for it: taken back from the queue (unless
			 * a worker alive took it meanwhile) and answered 503.
			 */
			bool mine = false;

			pthread_mutex_lock(&srv->wmu);
			srv->workers--;
			for (struct conn_state **pp = &srv->wq_head; *pp;
			     pp = &(*pp)->wnext) {
				if (*pp != cs)
					continue;
				*pp = cs->wnext;
				mine = true;
				srv->nqueued--;
				break;
			}
			srv->wq_tail = srv->wq_head;
			while (srv->wq_tail && srv->wq_tail->wnext)
				srv->wq_tail = srv->wq_tail->wnext;
			pthread_mutex_unlock(&srv->wmu);
			if (mine && how == PARK_PASS)
				srv->cfg.pass_free(cs->pass_st);
			if (mine) {
				cnl_http_error(&cs->resp, 503, "overloaded",
				               "no thread to serve the request "
				               "(%s); try again later",
				               strerror(e));
				cnl_http_wake(cs, 0);
			}
		}
	}
	return MHD_YES;
}

/* Hold @conn until @cs->resp's event (resp.wait). */
static enum MHD_Result park_wait(struct cnl_http_server *srv,
                                 struct MHD_Connection *conn,
                                 struct conn_state *cs)
{
	int r;

	if (!park(srv, conn, cs, PARK_WAIT)) {
		struct cnl_http_response resp = cs->resp;

		memset(&cs->resp, 0, sizeof(cs->resp));
		resp.wait = NULL;
		resp.waited(resp.wait_arg, -ESHUTDOWN, &resp);
		resp.waited = NULL;
		return answer_stopping(conn, cs, &resp);
	}
	r = cs->resp.wait(cs->resp.wait_arg, cs);
	if (r != 0)
		cnl_http_wake(cs, r == 1 ? 0 : r);
	return MHD_YES;
}

/* The access handler's call after a held connection was resumed: its
 * answer goes. */
static enum MHD_Result unpark(struct MHD_Connection *conn,
                              struct conn_state *cs)
{
	struct cnl_http_response resp = cs->resp;
	enum park how = cs->park;

	memset(&cs->resp, 0, sizeof(cs->resp));
	cs->park = PARK_NONE;
	if (how == PARK_WAIT && resp.waited)
		resp.waited(resp.wait_arg, cs->wake_r, &resp);
	resp.wait = NULL;
	resp.waited = NULL;
	resp.wait_arg = NULL;
	return send_response(conn, cs, &resp);
}

static enum MHD_Result too_large(struct cnl_http_server *srv,
                                 struct MHD_Connection *conn)
{
	struct cnl_http_response resp = {0};

	cnl_http_error(&resp, 413, "payload_too_large",
	               "request body exceeds %zu bytes, the limit of this "
	               "route",
	               srv->cfg.body_max);
	return send_response(conn, NULL, &resp);
}

/* Append a chunk, or only note the overflow once past the limit. */
static void append_body(struct cnl_http_server *srv, struct conn_state *cs,
                        const char *data, size_t n)
{
	if (cs->too_large)
		return;
	if (n > srv->cfg.body_max - cs->len) {
		cs->too_large = true;
		free(cs->body);
		cs->body = NULL;
		cs->len = cs->cap = 0;
		return;
	}
	if (cs->len + n + 1 > cs->cap) {
		size_t cap = cs->cap ? cs->cap : 4096;

		while (cap < cs->len + n + 1)
			cap *= 2;
		cs->body = cnl_xrealloc(cs->body, cap);
		cs->cap = cap;
	}
	memcpy(cs->body + cs->len, data, n);
	cs->len += n;
	cs->body[cs->len] = '\0';
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind,
                                      const char *key, size_t key_size,
                                      const char *value, size_t value_size)
{
	struct cnl_http_framing *f = cls;

	(void)kind;
	/* A NUL inside would hide the rest from the checks. */
	if ((key && strlen(key) != key_size) ||
	    (value && strlen(value) != value_size))
		bad_field(f, key ? key : "");
	cnl_http_framing_add(f, key, value);
	return MHD_YES;
}

/* The first call's checks, before anything is routed: a connection over
 * the limits (TLS) gets its 503, a head with ambiguous framing a 400.
 * Returns true with @resp set when the request is answered so. */
static bool head_refused(struct cnl_http_server *srv,
                         struct MHD_Connection *conn, const char *uri,
                         const char *version, struct cnl_http_response *resp)
{
	struct cnl_http_framing f = {0};
	char why[256];

	/* libmicrohttpd decodes the target in place: "%00" would end the
	 * path there, and "/v1/users%00.css" be served as /v1/users (a
	 * proxy or cache in front sees another path). */
	if (uri && strcasestr(uri, "%00")) {
		cnl_http_error(resp, 400, "bad_request",
		               "request target: %%00 (a NUL byte) is not "
		               "allowed in a path or query");
		return true;
	}

	if (track_phase(srv, conn, PH_BODY)) {
		char h[64];

		cnl_http_error(resp, 503, "overloaded",
		               "too many connections; try again later");
		snprintf(h, sizeof(h), "Retry-After: %u\r\n",
		         srv->cfg.retry_after_s);
		resp->headers = cnl_xstrdup(h);
		return true;
	}
	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, framing_header, &f);
	if (cnl_http_framing_end(&f, NULL, why, sizeof(why)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", why);
		return true;
	}
	if (srv->cfg.trust_header && srv->cfg.trust) {
		const char *v = MHD_lookup_connection_value(
		    conn, MHD_HEADER_KIND, srv->cfg.trust_header);

		if (v && srv->cfg.trust(srv->cfg.trust_ud, v))
			track_trusted(srv, conn);
	}
	/* RFC 9112: an HTTP/1.1 request without Host is a 400 (the origin a
	 * proxy in front and we would each assume could differ); HTTP/1.0
	 * has no chunked coding, so a Transfer-Encoding there frames
	 * nothing we could agree on with a proxy. */
	if (version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
	    !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host")) {
		cnl_http_error(resp, 400, "bad_request",
		               "Host: an HTTP/1.1 request needs one");
		return true;
	}
	if (version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0 &&
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                "Transfer-Encoding")) {
		cnl_http_error(resp, 400, "bad_request",
		               "Transfer-Encoding: not allowed in HTTP/1.0");
		return true;
	}
	return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
	struct cnl_http_server *srv = cls;
	struct conn_state *cs = *con_cls;
	struct cnl_http_request req = {0};
	struct cnl_http_response resp = {0};
	const struct cnl_http_route *route = NULL;

	if (!cs) {
		cs = cnl_xcalloc(1, sizeof(*cs));
		cs->srv = srv;
		*con_cls = cs;
	}
	if (cs->park != PARK_NONE)
		return unpark(conn, cs);
	/* Called again after its answer was queued (libmicrohttpd does when
	 * stopping, where queueing is a no-op): never served twice. */
	if (cs->answered && *data_size == 0)
		return MHD_NO;
	req.uri = cs->uri ? cs->uri : url;
	if (!cs->started) {
		const char *cl = MHD_lookup_connection_value(
		    conn, MHD_HEADER_KIND, "Content-Length");
		const char *pp = srv->cfg.pass_prefix;
		char *end;
		unsigned long long v;

		cs->started = true;
		if (head_refused(srv, conn, cs->uri, version, &resp)) {
			cs->too_large = true; /* drop what comes */
			return send_response(conn, cs, &resp);
		}
		req.method = method;
		req.path = url;
		req.body = "";
		req.conn = conn;
		if (pp && pp[0] && srv->cfg.pass_open &&
		    strncmp(url, pp, strlen(pp)) == 0) {
			int pr = srv->cfg.pass_open(srv->cfg.ud, &req, &resp,
			                            &cs->pass);

			if (pr < 0) {
				cs->passed = true;
				cs->pass = NULL;
				return send_response(conn, cs, &resp);
			}
			if (pr == 0) {
				cs->passed = true;
				return MHD_YES;
			}
			/* Declined (@resp untouched): routed as any other
			 * request. */
			cs->pass = NULL;
		}
		if (srv->cfg.open_sink &&
		    cnl_http_route_match(srv->cfg.routes, srv->cfg.nroutes,
		                         method, url, &req, &route,
		                         resp.allow) == CNL_HTTP_MATCH_OK) {
			int r = srv->cfg.open_sink(srv->cfg.ud, route, &req,
			                           &resp, &cs->sink);

			if (r < 0) {
				cs->sink = NULL;
				cs->too_large = true; /* drop what comes */
				return send_response(conn, cs, &resp);
			}
			if (r == 0)
				return MHD_YES;
			cs->sink = NULL;
		}
		resp.allow[0] = '\0';
		if (cl) {
			errno = 0;
			v = strtoull(cl, &end, 10);
			if (!errno && end != cl && *end == '\0' &&
			    v > srv->cfg.body_max) {
				cs->too_large = true;
				return too_large(srv, conn);
			}
		}
		return MHD_YES;
	}
	if (cs->passed) {
		if (*data_size) {
			track_phase(srv, conn, PH_BODY);
			if (cs->pass && !cs->pass_drop &&
			    srv->cfg.pass_body(cs->pass, data, *data_size) < 0)
				cs->pass_drop = true;
			*data_size = 0;
			return MHD_YES;
		}
		if (!cs->pass)
			return MHD_NO;
		track_phase(srv, conn, PH_BUSY);
		req.method = method;
		req.path = url;
		req.body = "";
		req.conn = conn;
		{
			void *st = cs->pass;

			cs->pass = NULL; /* pass_end's from here */
			if (srv->events) {
				cs->pass_st = st;
				cs->req = req;
				return park_work(srv, conn, cs, PARK_PASS);
			}
			srv->cfg.pass_end(st, &req, &resp);
		}
		return send_response(conn, cs, &resp);
	}
	if (*data_size)
		track_phase(srv, conn, PH_BODY); /* progress */
	if (*data_size && cs->sink) {
		if (!cs->sink->failed &&
		    cs->sink->write(cs->sink, data, *data_size) < 0)
			cs->sink->failed = true;
		*data_size = 0;
		return MHD_YES;
	}
	if (*data_size) {
		append_body(srv, cs, data, *data_size);
		*data_size = 0;
		return MHD_YES;
	}
	track_phase(srv, conn, PH_BUSY);
	if (cs->too_large)
		return too_large(srv, conn);

	req.method = method;
	req.path = url;
	req.body = cs->body ? cs->body : "";
	req.body_len = cs->len;
	req.sink = cs->sink;
	req.conn = conn;
	switch (cnl_http_route_match(srv->cfg.routes, srv->cfg.nroutes, method,
	                             url, &req, &route, resp.allow)) {
	case CNL_HTTP_MATCH_NO_PATH:
		cnl_http_error(&resp, 404, "not_found", "no such path");
		break;
	case CNL_HTTP_MATCH_NO_METHOD:
		cnl_http_error(&resp, 405, "method_not_allowed",
		               "method %s not allowed here; allowed: %s",
		               method, resp.allow);
		break;
	case CNL_HTTP_MATCH_OK:
		if (srv->events && !srv->cfg.quick(srv->cfg.ud, route, &req)) {
			cs->route = route;
			cs->req = req;
			return park_work(srv, conn, cs, PARK_SERVE);
		}
		req.may_wait = srv->events;
		srv->cfg.serve(srv->cfg.ud, route, &req, &resp);
		if (resp.retry_blocking) {
			response_discard(&resp);
			cs->route = route;
			cs->req = req;
			cs->req.may_wait = false;
			return park_work(srv, conn, cs, PARK_SERVE);
		}
		if (resp.wait) {
			cs->resp = resp;
			return park_wait(srv, conn, cs);
		}
		break;
	}
	return send_response(conn, cs, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct cnl_http_server *srv = cls;
	struct conn_state *cs = *con_cls;

	(void)toe;
	/* A kept-alive connection's next head is timed from here. */
	track_phase(srv, conn, PH_HEAD);
	if (cs) {
		/* Resumed but closed before its answer went. */
		if (cs->park == PARK_WAIT && cs->resp.waited)
			cs->resp.waited(cs->resp.wait_arg, cs->wake_r,
			                &cs->resp);
		response_discard(&cs->resp);
		if (cs->sink)
			cs->sink->free(cs->sink);
		if (cs->pass)
			srv->cfg.pass_free(cs->pass);
		if (cs->upgrade_free)
			cs->upgrade_free(cs->upgrade_arg);
		free(cs->uri);
		free(cs->body);
		free(cs);
		*con_cls = NULL;
	}
}

/* Called by libmicrohttpd with the request target as sent, before the
 * access handler: the state starts here, with the target kept. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct conn_state *cs = cnl_xcalloc(1, sizeof(*cs));

	cs->srv = cls;
	cs->uri = cnl_xstrdup(uri ? uri : "");
	return cs;
}

/* Bind and listen on @sa; the socket, or a negative errno. */
static int listen_on(const struct sockaddr_in *sa)
{
	int one = 1, e;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 ||
	    listen(fd, 4096) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static void server_destroy(struct cnl_http_server *srv)
{
	if (srv->running) {
		char b = 1;
		ssize_t w = write(srv->wake[1], &b, 1);

		(void)w;
		pthread_join(srv->acceptor, NULL);
	}
	if (srv->events) {
		pthread_mutex_lock(&srv->wmu);
		srv->stopping = true;
		while (srv->parked)
			pthread_cond_wait(&srv->quiet, &srv->wmu);
		pthread_mutex_unlock(&srv->wmu);
		pumps_cut(srv);
	}
	if (srv->daemon)
		MHD_stop_daemon(srv->daemon);
	if (srv->events) {
		pthread_mutex_lock(&srv->wmu);
		srv->wstop = true;
		pthread_cond_broadcast(&srv->wcv);
		while (srv->workers || srv->pumps)
			pthread_cond_wait(&srv->quiet, &srv->wmu);
		pthread_mutex_unlock(&srv->wmu);
	}
	for (size_t i = 0; i < srv->nlinger; i++)
		close(srv->lingers[i].fd);
	if (srv->lfd >= 0)
		close(srv->lfd);
	if (srv->wake[0] >= 0) {
		close(srv->wake[0]);
		close(srv->wake[1]);
	}
	pthread_mutex_destroy(&srv->mu);
	pthread_mutex_destroy(&srv->wmu);
	pthread_cond_destroy(&srv->wcv);
	pthread_cond_destroy(&srv->quiet);
	free(srv->busy[0]);
	free(srv->busy[1]);
	free(srv->track);
	free(srv->peers);
	free(srv->lingers);
	free(srv);
}

int cnl_http_server_new(const struct cnl_http_config *cfg,
                        struct cnl_http_server **ret, char *err, size_t errlen)
{
	struct cnl_http_server *srv;
	struct sockaddr_in sa = {0};
	int r;

	if (!cfg || !ret || !cfg->serve)
		return config_err(err, errlen, "incomplete server config");
	if ((r = cnl_http_routes_check(cfg->routes, cfg->nroutes, err,
	                               errlen)) < 0)
		return r;
	if (cfg->pass_prefix && (!cfg->pass_open || !cfg->pass_body ||
	                         !cfg->pass_end || !cfg->pass_free))
		return config_err(err, errlen,
		                  "a pass prefix needs its four callbacks");

	sa.sin_family = AF_INET;
	sa.sin_port = htons(cfg->port);
	if (!cfg->host || inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1)
		return config_err(err, errlen,
		                  "listen host \"%s\" is not an IPv4 address",
		                  cfg->host ? cfg->host : "");

	srv = cnl_xcalloc(1, sizeof(*srv));
	srv->cfg = *cfg;
	srv->lfd = srv->wake[0] = srv->wake[1] = -1;
	pthread_mutex_init(&srv->mu, NULL);
	pthread_mutex_init(&srv->wmu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&srv->wcv, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_cond_init(&srv->quiet, NULL);
	srv->events = cfg->quick != NULL;
	if (!srv->cfg.body_max)
		srv->cfg.body_max = CNL_HTTP_BODY_MAX_DEFAULT;
	if (!srv->cfg.conn_max)
		srv->cfg.conn_max = CNL_HTTP_CONN_MAX_DEFAULT;
	if (!srv->cfg.conn_per_client)
		srv->cfg.conn_per_client = CNL_HTTP_CONN_PER_CLIENT_DEFAULT;
	if (srv->cfg.header_timeout_ms <= 0)
		srv->cfg.header_timeout_ms = CNL_HTTP_HEADER_TIMEOUT_DEFAULT;
	if (srv->cfg.body_timeout_ms <= 0)
		srv->cfg.body_timeout_ms = CNL_HTTP_BODY_TIMEOUT_DEFAULT;
	if (!srv->cfg.retry_after_s)
		srv->cfg.retry_after_s = CNL_HTTP_RETRY_AFTER_DEFAULT;
	if (!cfg->tls_cert_pem != !cfg->tls_key_pem) {
		server_destroy(srv);
		return config_err(err, errlen,
		                  "TLS needs both a certificate and a key");
	}
	if (cfg->tls_cert_pem &&
	    MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
		server_destroy(srv);
		return config_err(err, errlen,
		                  "this libmicrohttpd was built without TLS");
	}
	srv->tls = cfg->tls_cert_pem != NULL;
	{
		struct rlimit rl = {0};

		/* A row per descriptor the process may open. */
		getrlimit(RLIMIT_NOFILE, &rl);
		srv->ntrack =
		    rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 20)
		        ? (1 << 20)
		        : (int)rl.rlim_cur;
		if (srv->ntrack < 64)
			srv->ntrack = 64;
	}
	srv->track = cnl_xcalloc((size_t)srv->ntrack, sizeof(*srv->track));
	srv->peers = cnl_xcalloc(srv->cfg.conn_max, sizeof(*srv->peers));
	srv->lingers = cnl_xcalloc(LINGER_MAX, sizeof(*srv->lingers));
	srv->busy[0] = busy_reply(srv->cfg.retry_after_s,
	                          "the server is at its connection limit; "
	                          "try again later",
	                          &srv->busy_len[0]);
	srv->busy[1] = busy_reply(srv->cfg.retry_after_s,
	                          "too many connections from your address; "
	                          "try again later",
	                          &srv->busy_len[1]);
	if ((r = listen_on(&sa)) < 0) {
		server_destroy(srv);
		config_err(err, errlen, "cannot listen on %s:%u: %s", cfg->host,
		           (unsigned)cfg->port, strerror(-r));
		return r == -EADDRINUSE ? r : -EIO;
	}
	srv->lfd = r;
	if (pipe2(srv->wake, O_CLOEXEC) < 0) {
		srv->wake[0] = srv->wake[1] = -1;
		server_destroy(srv);
		config_err(err, errlen, "cannot make a pipe");
		return -EIO;
	}
	/* libmicrohttpd's own idle timeout (seconds) must not cut a body
	 * before ours does. */
	if (srv->events && !srv->cfg.threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		srv->cfg.threads = n < 2 ? 2 : n > 64 ? 64 : (unsigned)n;
	}
	srv->daemon = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD |
	        (srv->events ? 0 : MHD_USE_THREAD_PER_CONNECTION) |
	        MHD_USE_AUTO | MHD_ALLOW_UPGRADE | MHD_USE_NO_LISTEN_SOCKET |
	        MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME |
	        (cfg->tls_cert_pem ? MHD_USE_TLS : 0),
	    0, NULL, NULL, on_request, srv, MHD_OPTION_URI_LOG_CALLBACK, on_uri,
	    srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	    MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
	    MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)(srv->cfg.body_timeout_ms / 1000 > 60
	                   ? srv->cfg.body_timeout_ms / 1000 + 1
	                   : 60),
	    /* Rows are freed a moment before libmicrohttpd counts a
	     * connection gone, and over-the-limit TLS ones come on top: its
	     * own limit must never be what refuses.  With event threads it
	     * splits the limit among them and hands a connection to one
	     * before counting those still queued to it (a flood can queue
	     * them all to one, which then closes the excess unanswered):
	     * each thread gets the whole of it. */
	    MHD_OPTION_CONNECTION_LIMIT,
	    (srv->cfg.conn_max * 2 + 64) * (srv->events ? srv->cfg.threads : 1),
	    MHD_OPTION_THREAD_POOL_SIZE, srv->events ? srv->cfg.threads : 0,
	    cfg->tls_cert_pem ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END,
	    cfg->tls_cert_pem, MHD_OPTION_HTTPS_MEM_KEY, cfg->tls_key_pem,
	    MHD_OPTION_END);
	if (!srv->daemon) {
		server_destroy(srv);
		config_err(err, errlen, "cannot start serving on %s:%u",
		           cfg->host, (unsigned)cfg->port);
		return -EIO;
	}
	{
		struct sockaddr_in bound = {0};
		socklen_t blen = sizeof(bound);

		getsockname(srv->lfd, (struct sockaddr *)&bound, &blen);
		srv->port = ntohs(bound.sin_port);
	}
	if (pthread_create(&srv->acceptor, NULL, acceptor_main, srv) != 0) {
		server_destroy(srv);
		config_err(err, errlen, "cannot start the accepting thread");
		return -EIO;
	}
	(void)pthread_setname_np(srv->acceptor, "cnl-accept");
	srv->running = true;
	*ret = srv;
	return 0;
}

uint16_t cnl_http_server_port(const struct cnl_http_server *srv)
{
	return srv->port;
}

void cnl_http_server_free(struct cnl_http_server *srv)
{
	if (!srv)
		return;
	server_destroy(srv);
}
