/*
 * forward.c - a notebook server's port on the node, relayed into the
 * server's network namespace (see forward.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent/forward.h"
#include "cnlab/errors.h"

/* Open connections from one source address. */
struct source {
	unsigned char addr[16]; /* IPv4 in the first 4 bytes */
	int n;
};

/* The workload's processes looked at for its namespace: its init comes
 * early in the list. */
#define CNL_FWD_PIDS 256

struct cnl_fwd {
	struct cnl_launcher *l;
	char id[CNL_LAUNCH_ID_MAX + 1];
	int lfd, port;
	int stop[2]; /* a byte on stop[1] ends the accept thread */
	pthread_t thread;
	atomic_int conns;
	pthread_mutex_t mu; /* guards sources */
	struct source sources[CNL_FWD_CONNS];
};

struct conn {
	struct cnl_fwd *f; /* freed only once conns is 0: see cnl_fwd_stop */
	int fd, ns;        /* the client; the namespace's descriptor */
	int port;
	int source; /* index in f->sources */
};

/* Count a connection from @sa; -1 when its source has too many (or the
 * table is full), else the source's index. */
static int source_take(struct cnl_fwd *f, const struct sockaddr_storage *sa)
{
	unsigned char key[16] = {0};
	int free_at = -1, at = -1;

	if (sa->ss_family == AF_INET6)
		memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	else
		memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < CNL_FWD_CONNS && at < 0; i++) {
		if (f->sources[i].n > 0 &&
		    memcmp(f->sources[i].addr, key, 16) == 0)
			at = i;
		else if (f->sources[i].n == 0 && free_at < 0)
			free_at = i;
	}
	if (at < 0 && free_at >= 0) {
		at = free_at;
		memcpy(f->sources[at].addr, key, 16);
	}
	if (at >= 0 && f->sources[at].n >= CNL_FWD_PER_SOURCE)
		at = -1;
	if (at >= 0)
		f->sources[at].n++;
	pthread_mutex_unlock(&f->mu);
	return at;
}

static void source_put(struct cnl_fwd *f, int at)
{
	pthread_mutex_lock(&f->mu);
	f->sources[at].n--;
	pthread_mutex_unlock(&f->mu);
}

/* Whether process @pid is in workload @id's cgroup (a line of its
 * /proc/PID/cgroup ends in /@id). */
static bool still_ours(pid_t pid, const char *id)
{
	char p[64], buf[4096], want[CNL_LAUNCH_ID_MAX + 3];
	ssize_t n;
	int fd;

	snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	snprintf(want, sizeof(want), "/%s\n", id);
	return strstr(buf, want) != NULL;
}

/* The network namespace of a process of workload @id that is not ours:
 * an open descriptor, or -1. */
static int find_netns(struct cnl_launcher *l, const char *id)
{
	pid_t pids[CNL_FWD_PIDS];
	char own[64] = "";
	ssize_t n = readlink("/proc/self/ns/net", own, sizeof(own) - 1);
	int np = cnl_launcher_procs(l, id, pids, CNL_FWD_PIDS), ns = -1;

	if (n <= 0 || np <= 0)
		return -1;
	own[n] = '\0';
	for (int i = 0; i < np && i < CNL_FWD_PIDS && ns < 0; i++) {
		char link[64], p[64];
		ssize_t m;

		snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pids[i]);
		m = readlink(p, link, sizeof(link) - 1);
		if (m <= 0)
			continue;
		link[m] = '\0';
		if (strcmp(link, own) != 0)
			ns = open(p, O_RDONLY | O_CLOEXEC);
		/* The pid may have ended and been reused between the list
		 * and the open: keep the namespace only if the process that
		 * holds that pid now is still the workload's. */
		if (ns >= 0 && !still_ours(pids[i], id)) {
			close(ns);
			ns = -1;
		}
	}
	return ns;
}

/* Copy what @from has into @to; false when @from is at its end or either
 * side failed. */
static bool pump(int from, int to)
{
	char buf[65536];
	ssize_t n = read(from, buf, sizeof(buf));

	if (n <= 0)
		return false;
	for (ssize_t o = 0; o < n;) {
		ssize_t w = write(to, buf + o, (size_t)(n - o));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		o += w;
	}
	return true;
}

/* A connection to 127.0.0.1:@port in this thread's network namespace,
 * tried for a while when refused (a server that is still starting); the
 * socket, or a negative errno. */
static int connect_loopback(int port)
{
	struct sockaddr_in up = {.sin_family = AF_INET,
	                         .sin_port = htons((uint16_t)port)};
	int s = -ECONNREFUSED;

	up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < 100; i++) {
		bool refused;

		s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			return -errno;
		if (connect(s, (struct sockaddr *)&up, sizeof(up)) == 0)
			return s;
		refused = errno == ECONNREFUSED;
		close(s);
		s = -errno;
		if (!refused)
			break;
		nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
	}
	return s < 0 ? s : -ECONNREFUSED;
}

int cnl_fwd_dial(struct cnl_launcher *l, const char *id, int port,
                 bool own_netns)
{
	int ns, r;

	if (own_netns) {
		if ((ns = find_netns(l, id)) < 0)
			return -ESRCH;
		r = setns(ns, CLONE_NEWNET);
		close(ns);
		if (r < 0)
			return -errno;
	}
	return connect_loopback(port);
}

static void *relay(void *arg)
{
	struct conn *c = arg;
	int s = -1;
	/* A client that says nothing holds a slot for nothing. */
	struct pollfd first = {c->fd, POLLIN, 0};
	int ready;

	while ((ready = poll(&first, 1, CNL_FWD_FIRST_BYTE_MS)) < 0 &&
	       errno == EINTR)
		;
	/* This thread moves into the server's network namespace: the
	 * socket it makes there stays there. */
	if (ready == 1 && setns(c->ns, CLONE_NEWNET) == 0)
		s = connect_loopback(c->port);
	close(c->ns);
	if (s >= 0) {
		struct pollfd p[2] = {{c->fd, POLLIN, 0}, {s, POLLIN, 0}};
		bool open_in = true, open_out = true;

		/* Until the server's side ends (the client may leave first:
		 * the server still answers what it was sent). */
		while (open_out) {
			if (poll(p, 2, -1) < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			if (open_in &&
			    (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
				if (!pump(c->fd, s)) {
					open_in = false;
					p[0].fd = -1;
					shutdown(s, SHUT_WR);
				}
			}
			if (open_out &&
			    (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
				if (!pump(s, c->fd)) {
					open_out = false;
					p[1].fd = -1;
					shutdown(c->fd, SHUT_WR);
				}
			}
		}
		close(s);
	}
	close(c->fd);
	source_put(c->f, c->source);
	atomic_fetch_sub(&c->f->conns, 1);
	free(c);
	return NULL;
}

static void *accept_loop(void *arg)
{
	struct cnl_fwd *f = arg;
	struct pollfd p[2] = {{f->lfd, POLLIN, 0}, {f->stop[0], POLLIN, 0}};

	for (;;) {
		struct sockaddr_storage sa;
		socklen_t salen = sizeof(sa);
		struct conn *c;
		pthread_attr_t at;
		pthread_t t;
		int fd, ns, src;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(f->lfd, (struct sockaddr *)&sa, &salen,
		             SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (atomic_load(&f->conns) >= CNL_FWD_CONNS ||
		    (src = source_take(f, &sa)) < 0) {
			close(fd);
			continue;
		}
		if ((ns = find_netns(f->l, f->id)) < 0 ||
		    !(c = calloc(1, sizeof(*c)))) {
			if (ns >= 0)
				close(ns);
			source_put(f, src);
			close(fd);
			continue;
		}
		*c = (struct conn){f, fd, ns, f->port, src};
		atomic_fetch_add(&f->conns, 1);
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, relay, c) != 0) {
			source_put(f, src);
			atomic_fetch_sub(&f->conns, 1);
			close(ns);
			close(fd);
			free(c);
		}
		pthread_attr_destroy(&at);
	}
	return NULL;
}

int cnl_fwd_start(struct cnl_launcher *l, const char *id, const char *addr,
                  int port, struct cnl_fwd **ret, int *ret_port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	struct cnl_fwd *f;
	char service[16];
	int r, one = 1;

	if (!l || !id || strlen(id) > CNL_LAUNCH_ID_MAX || port < 0 ||
	    port > 65535)
		return -EINVAL;
	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(addr && addr[0] ? addr : "127.0.0.1", service, &hints,
	                &res) != 0 ||
	    !res)
		return -CNL_ENOTFOUND;
	f = calloc(1, sizeof(*f));
	if (!f) {
		freeaddrinfo(res);
		return -ENOMEM;
	}
	f->l = l;
	pthread_mutex_init(&f->mu, NULL);
	snprintf(f->id, sizeof(f->id), "%s", id);
	f->lfd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0 ||
	    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) <
	        0 ||
	    bind(f->lfd, res->ai_addr, res->ai_addrlen) < 0 ||
	    listen(f->lfd, 64) < 0 ||
	    getsockname(f->lfd, (struct sockaddr *)&sa, &len) < 0 ||
	    pipe2(f->stop, O_CLOEXEC) < 0) {
		r = -errno;
		if (f->lfd >= 0)
			close(f->lfd);
		freeaddrinfo(res);
		free(f);
		return r;
	}
	freeaddrinfo(res);
	f->port = ntohs(sa.ss_family == AF_INET6
	                    ? ((struct sockaddr_in6 *)&sa)->sin6_port
	                    : ((struct sockaddr_in *)&sa)->sin_port);
	if ((r = pthread_create(&f->thread, NULL, accept_loop, f)) != 0) {
		close(f->lfd);
		close(f->stop[0]);
		close(f->stop[1]);
		free(f);
		return -r;
	}
	*ret = f;
	*ret_port = f->port;
	return 0;
}

void cnl_fwd_stop(struct cnl_fwd *f)
{
	if (!f)
		return;
	if (write(f->stop[1], "x", 1) < 0) {
		/* the pipe is ours and empty: cannot fail */
	}
	pthread_join(f->thread, NULL);
	close(f->lfd);
	close(f->stop[0]);
	close(f->stop[1]);
	/* Relays hold no pointer to f beyond its counter: wait for them. */
	for (int i = 0; i < 500 && atomic_load(&f->conns) > 0; i++)
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	if (atomic_load(&f->conns) == 0) {
		pthread_mutex_destroy(&f->mu);
		free(f);
	}
	/* else: leaked deliberately, a relay still counts on it */
}
