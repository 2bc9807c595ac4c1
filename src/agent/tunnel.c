/*
 * tunnel.c - the node end of cnlabd's notebook proxy (api_proxy.c on the
 * other side): the agent dials out, cnlabd never dials the node.
 *
 *   tunnel thread   GET /v1/nodes/{id}/tunnels?wait=5   (long poll)
 *     └─ per tunnel, a thread of its own:
 *          POST /v1/nodes/{id}/tunnels/{tunnel}, Upgrade: cnlab-tunnel
 *          → 101: the connection is the tunnel
 *          cnl_fwd_dial(): 127.0.0.1:PORT in the server's network
 *          namespace (the thread moves there; the tunnel was made first)
 *          bytes both ways until either side ends
 *
 * Only this node's running servers are reached: a tunnel naming anything
 * else (a job, a workload that is stopping, one of another node) is not
 * opened, and cnlabd answers its user 504 once it gives up.  An open
 * tunnel counts as activity for the server's idle timeout (wk.tunnels).
 * Relays look at a->stop each second, so an agent that stops ends them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

struct one {
	struct cnl_agent *a;
	char tunnel[CNL_WIRE_ID_MAX];
	char id[CNL_WIRE_ID_MAX];
	int port;
};

/* Note the start (+1) or end (-1) of a tunnel of workload @id. */
static void count(struct cnl_agent *a, const char *id, int d)
{
	struct wk *w;

	pthread_mutex_lock(&a->mu);
	if ((w = cnl_agent_wk_find(a, id))) {
		if (d > 0 || w->tunnels > 0)
			w->tunnels += d;
		w->last_active_ms = cnl_time_now_ms();
	}
	pthread_mutex_unlock(&a->mu);
}

static int write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Bytes both ways between cnlabd's stream @s and the server's @fd. */
static void relay(struct cnl_agent *a, struct cnl_client_stream *s, int fd)
{
	char buf[65536];

	while (!a->stop) {
		struct pollfd p[2] = {{cnl_client_stream_fd(s), POLLIN, 0},
		                      {fd, POLLIN, 0}};
		ssize_t n;

		/* What the stream already holds (TLS records, bytes read
		 * with the 101) shows in no poll: take it first. */
		while ((n = cnl_client_stream_read(s, buf, sizeof(buf))) > 0)
			if (write_all(fd, buf, (size_t)n) < 0)
				return;
		if (n != -EAGAIN)
			return; /* cnlabd's side ended */
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			return;
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0 ||
			    cnl_client_stream_write(s, buf, (size_t)n) < 0)
				return;
		}
	}
}

static void *one_tunnel(void *arg)
{
	struct one *o = arg;
	struct cnl_agent *a = o->a;
	struct cnl_client_config ccfg = {
	    .base = a->cfg.server,
	    .token = a->cfg.token,
	    .cafile = a->cfg.cafile,
	    .connect_timeout_ms = 5 * 1000,
	};
	struct cnl_client *cl = NULL;
	struct cnl_client_stream *s = NULL;
	char path[256], err[512], q[600];
	int fd = -1, r;

	snprintf(path, sizeof(path), "/v1/nodes/%s/tunnels/%s", a->node_id,
	         o->tunnel);
	if (cnl_client_new(&ccfg, &cl) < 0 ||
	    cnl_client_upgrade(cl, path, "cnlab-tunnel", &s, err, sizeof(err)) <
	        0) {
		cnl_log(CNL_LOG_WARN, "tunnel not opened", "id=%s err=%s",
		        o->id,
		        cnl_log_quote(q, sizeof(q), cl ? err : "client"));
		goto out;
	}
	/* After the tunnel: this moves the thread into the server's
	 * network namespace. */
	if ((fd = cnl_fwd_dial(a->launcher, o->id, o->port, !a->cfg.bare)) <
	    0) {
		r = fd;
		cnl_log(CNL_LOG_WARN, "server not reachable",
		        "id=%s err=\"%s\"", o->id, cnl_strerror(r));
		goto out;
	}
	relay(a, s, fd);
	close(fd);
out:
	cnl_client_stream_free(s);
	cnl_client_free(cl);
	count(a, o->id, -1);
	atomic_fetch_sub(&a->tunnels_open, 1);
	free(o);
	return NULL;
}

/* Start the relay of tunnel @t, when it names a running server of ours. */
static void start_one(struct cnl_agent *a, const struct cnl_wire_tunnel *t)
{
	struct one *o = cnl_xcalloc(1, sizeof(*o));
	pthread_attr_t at;
	pthread_t th;
	struct wk *w;

	o->a = a;
	snprintf(o->tunnel, sizeof(o->tunnel), "%s", t->id);
	snprintf(o->id, sizeof(o->id), "%s", t->workload);
	pthread_mutex_lock(&a->mu);
	w = cnl_agent_wk_find(a, t->workload);
	if (w && w->server && !w->stopping && !w->ended && w->port > 0) {
		o->port = w->port;
		w->tunnels++;
		w->last_active_ms = cnl_time_now_ms();
	}
	pthread_mutex_unlock(&a->mu);
	if (!o->port) {
		cnl_log(CNL_LOG_WARN, "tunnel for no running server of ours",
		        "tunnel=%s id=%s", t->id, t->workload);
		free(o);
		return;
	}
	atomic_fetch_add(&a->tunnels_open, 1);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, one_tunnel, o) != 0) {
		count(a, o->id, -1);
		atomic_fetch_sub(&a->tunnels_open, 1);
		free(o);
	}
	pthread_attr_destroy(&at);
}

void *cnl_agent_tunnels(void *arg)
{
	struct cnl_agent *a = arg;
	char route[256], err[512];

	snprintf(route, sizeof(route), "/v1/nodes/%s/tunnels?wait=5",
	         a->node_id);
	while (!a->stop) {
		struct cnl_wire_tunnels ts;
		json_t *reply = NULL;
		long st = cnl_client_call(a->tun_cl, "GET", route, NULL, 30,
		                          &reply, err, sizeof(err));

		if (st != 200 ||
		    cnl_wire_tunnels_decode(reply, &ts, err, sizeof(err)) < 0) {
			json_decref(reply);
			usleep(500 * 1000);
			continue;
		}
		json_decref(reply);
		for (size_t i = 0; i < ts.n; i++)
			start_one(a, &ts.items[i]);
	}
	/* Relays end within a second of a->stop. */
	for (int i = 0; i < 300 && atomic_load(&a->tunnels_open) > 0; i++)
		usleep(10 * 1000);
	return NULL;
}
