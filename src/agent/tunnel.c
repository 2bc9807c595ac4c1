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
 *        or, for `cnlab server exec` (the tunnel names a command):
 *          crun exec --no-new-privs --user 1000:1000 --cwd /workspace,
 *          started in the server's cgroup (cnl_launcher_spawn_in), its
 *          stdin an empty pipe, its output sent in exec frames
 *          (wire/node.h) as it comes, then its exit code
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
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
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
	char **argv; /* exec: the command (NULL-ended); NULL: the port */
	size_t argc;
};

static void one_free(struct one *o)
{
	for (size_t k = 0; o->argv && k < o->argc; k++)
		free(o->argv[k]);
	free(o->argv);
	free(o);
}

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

/* One exec frame (wire/node.h) to cnlabd; 0 or -1. */
static int frame(struct cnl_client_stream *s, int kind, const char *data,
                 size_t n)
{
	unsigned char h[5] = {(unsigned char)kind, (unsigned char)(n >> 24),
	                      (unsigned char)(n >> 16), (unsigned char)(n >> 8),
	                      (unsigned char)n};

	return cnl_client_stream_write(s, (const char *)h, 5) < 0 ||
	               (n && cnl_client_stream_write(s, data, n) < 0)
	           ? -1
	           : 0;
}

static void frame_exit(struct cnl_client_stream *s, int code)
{
	char c[4] = {(char)(code >> 24), (char)(code >> 16), (char)(code >> 8),
	             (char)code};

	frame(s, CNL_WIRE_EXEC_EXIT, c, 4);
}

/* Run @o's command in its server's container; its output and exit code
 * go to @s.  The caller going away kills it. */
static void exec_one(struct cnl_agent *a, struct one *o,
                     struct cnl_client_stream *s)
{
	const char *argv[CNL_WIRE_EXEC_ARGS + 16];
	char root[600], buf[65536], msg[256];
	int inp[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1};
	int n = 0, st = 0, open_fds = 2;
	pid_t pid = -1;

	if (a->cfg.bare || !a->runtime[0]) {
		snprintf(msg, sizeof(msg),
		         "cnlab server exec: node %s runs work without "
		         "containers (isolation bare): exec is not available\n",
		         a->cfg.name);
		frame(s, CNL_WIRE_EXEC_STDERR, msg, strlen(msg));
		frame_exit(s, 126);
		return;
	}
	snprintf(root, sizeof(root), "%s/crun", cnl_agent_rundir(a));
	argv[n++] = a->runtime;
	argv[n++] = "--cgroup-manager=disabled";
	argv[n++] = "--root";
	argv[n++] = root;
	argv[n++] = "exec";
	argv[n++] = "--no-new-privs";
	argv[n++] = "--user";
	argv[n++] = "1000:1000";
	argv[n++] = "--cwd";
	argv[n++] = "/workspace";
	argv[n++] = o->id;
	for (size_t k = 0; k < o->argc && k < CNL_WIRE_EXEC_ARGS; k++)
		argv[n++] = o->argv[k];
	argv[n] = NULL;
	/* stdin is an empty pipe, never the node's /dev/null (crun hands
	 * its stdio to the container's user; containers.md). */
	if (pipe2(inp, O_CLOEXEC) == 0 && pipe2(outp, O_CLOEXEC) == 0 &&
	    pipe2(errp, O_CLOEXEC) == 0)
		pid = cnl_launcher_spawn_in(a->launcher, o->id, argv, inp[0],
		                            outp[1], errp[1]);
	/* Ours are the read ends of the output; stdin is closed: empty. */
	if (inp[0] >= 0)
		close(inp[0]);
	if (inp[1] >= 0)
		close(inp[1]);
	if (outp[1] >= 0)
		close(outp[1]);
	if (errp[1] >= 0)
		close(errp[1]);
	if (pid < 0) {
		snprintf(msg, sizeof(msg),
		         "cnlab server exec: cannot start: %s\n",
		         cnl_strerror((int)pid));
		frame(s, CNL_WIRE_EXEC_STDERR, msg, strlen(msg));
		frame_exit(s, 126);
		goto out;
	}
	while (open_fds > 0) {
		struct pollfd p[3] = {{outp[0], POLLIN, 0},
		                      {errp[0], POLLIN, 0},
		                      {cnl_client_stream_fd(s), POLLIN, 0}};
		ssize_t r;

		if (a->stop || poll(p, 3, 1000) < 0) {
			if (!a->stop && errno == EINTR)
				continue;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 ||
			    !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(p[i].fd, buf, sizeof(buf));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				close(p[i].fd);
				(i ? errp : outp)[0] = -1;
				open_fds--;
			} else if (frame(s,
			                 i ? CNL_WIRE_EXEC_STDERR
			                   : CNL_WIRE_EXEC_STDOUT,
			                 buf, (size_t)r) < 0) {
				goto gone;
			}
		}
		/* The caller sends nothing: readable means it went away. */
		if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = cnl_client_stream_read(s, buf, sizeof(buf));
			if (r != -EAGAIN && r <= 0)
				goto gone;
		}
	}
	if (open_fds > 0)
		goto gone;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	frame_exit(s, WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
	goto out;
gone:
	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
out:
	if (outp[0] >= 0)
		close(outp[0]);
	if (errp[0] >= 0)
		close(errp[0]);
}

static void *one_tunnel(void *arg)
{
	struct one *o = arg;
	struct cnl_agent *a = o->a;
	struct cnl_client_config ccfg = {
	    .base = a->cfg.server,
	    .token_fn = cnl_agent_token_fn,
	    .token_ud = a,
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
	if (o->argv) {
		exec_one(a, o, s);
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
	one_free(o);
	return NULL;
}

/* Start the relay of tunnel @t (its command taken), when it names a
 * running server of ours. */
static void start_one(struct cnl_agent *a, struct cnl_wire_tunnel *t)
{
	struct one *o = cnl_xcalloc(1, sizeof(*o));
	pthread_attr_t at;
	pthread_t th;
	struct wk *w;

	o->a = a;
	snprintf(o->tunnel, sizeof(o->tunnel), "%s", t->id);
	snprintf(o->id, sizeof(o->id), "%s", t->workload);
	o->argv = t->argv;
	o->argc = t->argc;
	t->argv = NULL;
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
		one_free(o);
		return;
	}
	atomic_fetch_add(&a->tunnels_open, 1);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, one_tunnel, o) != 0) {
		count(a, o->id, -1);
		atomic_fetch_sub(&a->tunnels_open, 1);
		one_free(o);
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
			if (st == 200)
				cnl_wire_tunnels_done(&ts);
			json_decref(reply);
			usleep(500 * 1000);
			continue;
		}
		json_decref(reply);
		for (size_t i = 0; i < ts.n; i++)
			start_one(a, &ts.items[i]);
		cnl_wire_tunnels_done(&ts);
	}
	/* Relays end within a second of a->stop. */
	for (int i = 0; i < 300 && atomic_load(&a->tunnels_open) > 0; i++)
		usleep(10 * 1000);
	return NULL;
}
