/*
 * api_proxy.c - the notebook proxy at /s/{server}/... and the tunnels that
 * carry it: cnlabd never dials a node, the node dials cnlabd.
 *
 *   browser ──HTTP/WS──► cnlabd /s/{server}/...            (this file)
 *                          │ 1. credential + membership, every request
 *                          │ 2. a tunnel is queued for the server's node
 *                          ▼    and the node's long poll woken
 *   agent ──GET /v1/nodes/{node}/tunnels (long poll)──► lists it
 *   agent ──POST /v1/nodes/{node}/tunnels/{id}, Upgrade: cnlab-tunnel──►
 *                          │ 3. 101: the agent's connection is the
 *                          ▼    tunnel's byte stream
 *   agent ──connect 127.0.0.1:PORT inside the server's network namespace
 *
 * A server on a Kubernetes node is a pod (kube_sched.h) with no agent:
 * its "tunnel" is a connection cnlabd opens itself to the address the
 * Kubernetes scheduler reported (the pod's, port 8888), only for nodes
 * whose credentials that scheduler minted.  `cnlab server exec` there is
 * the API server's exec in the pod (cnl_api_set_kube_exec), its output
 * in the same exec frames; `cnlab server ssh` an sshd in inetd mode
 * started by that exec, its stdin and stdout the session's bytes
 * (cnl_api_set_kube_ssh).
 *
 * One tunnel carries one proxied request.  A plain request goes up as
 * HTTP/1.0 with "Connection: close", so the server's reply ends where the
 * tunnel ends and needs no framing of ours: its head is parsed here, its
 * body streamed to the browser as it comes (chunked when the server gave
 * no length).  The request body is streamed the other way as it arrives;
 * a body without a length (chunked) is refused with 411.  A WebSocket
 * request (Upgrade: websocket) goes up as HTTP/1.1; when the server
 * answers 101 the browser gets the 101 and a thread relays both ways
 * until either side ends.  The path goes up whole, /s/{server}/ included
 * (JupyterLab runs with that base URL; cnlab-notebook.py strips it).
 *
 * Credentials, checked on every request, in this order: the API's bearer
 * token (Authorization), the proxy's session cookie (cnlab_session, an
 * HS256 JWT for audience "cnlab-proxy:{server}", HttpOnly, SameSite=Strict,
 * Path=/s/{server}/, whose jti names a stored "proxy-cookie" document that
 * logout and enable delete: api_session.c), the server's own token
 * (?token=, what `cnlab server open` prints), which is exchanged for the
 * cookie and acts as the server's owner.  Whoever it names must still be a
 * member (or above) of the server's project: a removed member gets 403 on the
 * next request.  An open WebSocket or exec asks again (relay_allowed()) after
 * each authentication-relevant change and every REAUTH_MS: a logout, a
 * revoked token or proxy cookie, a disabled user or a removed member ends
 * it. The credential never reaches the server: Authorization, cnlabd's
 * cookies (this one, the dashboard's session cookie, the OIDC sign-in's:
 * api-internal.h) and ?token= are taken off, and the server gets its own
 * token as "Authorization: token T" (what JupyterLab and cnlab-notebook.py
 * check).
 *
 * The notebook origin.  A tenant's pages run in the viewer's browser, so
 * the proxy has a listener of its own (cnl_api_start_notebooks, config
 * notebook_listen / notebook_url): on the API's origin their scripts could
 * read the dashboard's CSRF token and act as the viewer.  That listener
 * passes every path here (nb_open): /s/ goes to the proxy, anything else
 * is a 404; the API's listener answers /s/ with a 308 to the notebook
 * origin (api_s_open) and serves no tenant content.  Cookies ignore
 * ports, so the server's Set-Cookie for one of cnlabd's cookie names, or
 * with a Domain, is dropped on the way back (set_cookie_refused).
 *
 * Limits: CNL_PROXY_PER_USER open tunnels per user and CNL_PROXY_PER_SERVER
 * per server (429 beyond); a tunnel the agent has not opened within
 * CNL_PROXY_OPEN_MS is given up (504 naming the node).  A server that is
 * not running is 409 (stopped, failed) or 503 (not running yet).
 *
 * `cnlab server exec` (POST /v1/servers/{server}/exec, a route of the
 * table: member, audited) queues a tunnel that carries the command; the
 * agent runs it in the server's container and answers in exec frames
 * (wire/node.h), which the route's 101 relays to the CLI.
 *
 * Locking: the tunnel list is under the API's lock; the proxy and the
 * agent's long poll wait on api->tun_cv with it.  Bytes move without it.
 * cnl_api_stop sets proxy_stop: waits, polls and relays end within a
 * second, so the HTTP server's threads can be joined.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/metrics.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "wire/node.h"

#define COOKIE_NAME CNL_API_PROXY_COOKIE
/* How long a proxy session cookie lasts. */
#define COOKIE_TTL_S (12 * 3600)
/* Largest head of a server's reply. */
#define HEAD_MAX (64 * 1024)
/* A server that says nothing for this long is dropped. */
#define IDLE_MS (10 * 60 * 1000)
/* An open WebSocket or exec asks again who opened it at least this often
 * (a session or token that expired). */
#define REAUTH_MS (60 * 1000)

struct cnl_api_tunnel {
	char id[40];
	char node[CNL_ID_MAX];
	char workload[CNL_ID_MAX];
	char user[CNL_ID_MAX];
	bool claimed;   /* listed to the agent */
	bool opened;    /* the agent's 101 went out: fd and u are set */
	bool abandoned; /* the proxy stopped waiting */
	/* A server in a Kubernetes pod: no agent, the pod's address
	 * ("10.1.2.3", "fd00::5") and port, which cnlabd connects to; it
	 * is never listed to a node. */
	bool direct;
	char addr[64];
	int port;
	int fd;
	struct cnl_http_upgrade *u;
	json_t *command; /* exec: the command's arguments; NULL: the port */
	/* ssh: the server's host key (private) and the owner's
	 * authorized_keys, for the node's sshd; NULL otherwise. */
	char *ssh_host_key, *ssh_keys;
	struct cnl_api_tunnel *next;
};

/* ---- bytes --------------------------------------------------------- */

/* Wait up to @ms for @events on @fd, a second at a time, giving up once
 * cnlabd stops (its threads are joined). */
static bool wait_fd(struct cnl_api *api, int fd, short events, int ms)
{
	for (int waited = 0; waited < ms && !atomic_load(&api->proxy_stop);
	     waited += 1000) {
		struct pollfd p = {fd, events, 0};
		int r = poll(&p, 1, 1000);

		if (r > 0)
			return true;
		if (r < 0 && errno != EINTR)
			return false;
	}
	return false;
}

/* All of @n bytes to @fd (which may be non-blocking); 0 or -1. */
static int write_all(struct cnl_api *api, int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (!wait_fd(api, fd, POLLOUT, IDLE_MS))
				return -1;
			continue;
		}
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Some bytes from @fd: > 0, 0 at its end, -1 on error or silence. */
static ssize_t read_some(struct cnl_api *api, int fd, char *buf, size_t n)
{
	for (;;) {
		ssize_t r = recv(fd, buf, n, 0);

		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		if (!wait_fd(api, fd, POLLIN, IDLE_MS))
			return -1;
	}
}

/* ---- tunnels ------------------------------------------------------- */

static struct cnl_api_tunnel *tunnel_find(struct cnl_api *api, const char *id)
{
	for (struct cnl_api_tunnel *t = api->tunnels; t; t = t->next)
		if (strcmp(t->id, id) == 0)
			return t;
	return NULL;
}

/* Take @t out of the list, close its connection, free it.  Without the
 * lock. */
static void tunnel_release(struct cnl_api *api, struct cnl_api_tunnel *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&api->mu);
	for (struct cnl_api_tunnel **pp = &api->tunnels; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	t->abandoned = true;
	pthread_mutex_unlock(&api->mu);
	if (t->u)
		cnl_http_upgrade_close(t->u);
	else if (t->fd >= 0)
		close(t->fd);
	json_decref(t->command);
	if (t->ssh_host_key)
		explicit_bzero(t->ssh_host_key, strlen(t->ssh_host_key));
	free(t->ssh_host_key);
	free(t->ssh_keys);
	free(t);
}

void cnl_api_h_node_tunnels(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_api *api = c->api;
	const char *node = cnl_http_param(req, "node");
	const char *qw = cnl_http_query(req, "wait");
	struct cnl_wire_tunnels out = {0};
	int64_t deadline;
	long wait = 0;
	char *end;

	if (qw) {
		errno = 0;
		wait = strtol(qw, &end, 10);
		if (errno || end == qw || *end || wait < 0 || wait > 50) {
			cnl_api_bad(resp,
			            "query \"wait\": must be 0..50 seconds");
			return;
		}
	}
	if (cnl_ctl_node_check(api->ctl, node) < 0) {
		cnl_http_error(resp, 404, "not_found", "node not found");
		return;
	}
	deadline = cnl_time_now_ms() + wait * 1000;
	for (;;) {
		struct timespec ts;
		int64_t left;

		for (struct cnl_api_tunnel *t = api->tunnels;
		     t && out.n < CNL_WIRE_TUNNELS_MAX; t = t->next) {
			if (t->claimed || t->abandoned || t->direct ||
			    strcmp(t->node, node) != 0)
				continue;
			t->claimed = true;
			snprintf(out.items[out.n].id, sizeof(out.items[0].id),
			         "%s", t->id);
			snprintf(out.items[out.n].workload,
			         sizeof(out.items[0].workload), "%s",
			         t->workload);
			if (t->ssh_host_key) {
				struct cnl_wire_tunnel *w = &out.items[out.n];

				w->ssh_host_key = cnl_xstrdup(t->ssh_host_key);
				w->ssh_keys = cnl_xstrdup(t->ssh_keys);
			}
			if (t->command) {
				struct cnl_wire_tunnel *w = &out.items[out.n];

				w->argc = json_array_size(t->command);
				w->argv =
				    cnl_xcalloc(w->argc + 1, sizeof(*w->argv));
				for (size_t k = 0; k < w->argc; k++)
					w->argv[k] =
					    cnl_xstrdup(json_string_value(
					        json_array_get(t->command, k)));
			}
			out.n++;
		}
		left = deadline - cnl_time_now_ms();
		if (out.n || left <= 0 || atomic_load(&api->proxy_stop))
			break;
		cnl_time_deadline(&ts, CLOCK_REALTIME, left);
		pthread_cond_timedwait(&api->tun_cv, &api->mu, &ts);
	}
	cnl_http_reply(resp, 200, cnl_wire_tunnels_encode(&out));
	cnl_wire_tunnels_done(&out);
}

/* What the agent's 101 hands over: which tunnel it was for. */
struct opening {
	struct cnl_api *api;
	char id[40];
};

static void tunnel_upgraded(void *arg, int fd, const char *extra, size_t n,
                            struct cnl_http_upgrade *u)
{
	struct opening *o = arg;
	struct cnl_api *api = o->api;
	struct cnl_api_tunnel *t;
	bool taken = false;

	pthread_mutex_lock(&api->mu);
	t = tunnel_find(api, o->id);
	/* The agent sends nothing before the proxy does: extra bytes are
	 * not the protocol. */
	if (t && !t->abandoned && !t->opened && n == 0) {
		t->fd = fd;
		t->u = u;
		t->opened = true;
		taken = true;
		pthread_cond_broadcast(&api->tun_cv);
	}
	pthread_mutex_unlock(&api->mu);
	if (!taken)
		cnl_http_upgrade_close(u);
	free(o);
}

void cnl_api_h_node_tunnel_open(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	const char *id = cnl_http_param(req, "tunnel");
	const char *up = cnl_http_header(req, "Upgrade");
	struct cnl_api_tunnel *t = tunnel_find(c->api, id);
	struct opening *o;

	snprintf(c->target, sizeof(c->target), "%s", id);
	if (!up || strcasecmp(up, "cnlab-tunnel") != 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "a tunnel is opened with \"Connection: "
		               "Upgrade\" and \"Upgrade: cnlab-tunnel\"");
		return;
	}
	/* Only the node the tunnel was queued for may open it. */
	if (!t || t->opened || t->abandoned || t->direct ||
	    strcmp(t->node, node) != 0) {
		cnl_http_error(resp, 404, "not_found",
		               "no tunnel %s waits for this node", id);
		return;
	}
	o = cnl_xcalloc(1, sizeof(*o));
	o->api = c->api;
	snprintf(o->id, sizeof(o->id), "%s", id);
	resp->status = 101;
	resp->headers = cnl_xstrdup("Upgrade: cnlab-tunnel\r\n");
	resp->upgraded = tunnel_upgraded;
	resp->upgrade_free = free;
	resp->upgrade_arg = o;
	/* One per proxied request: the audit trail keeps the refusals. */
	c->no_audit = true;
}

/* The address and port of the server's URL @url as a Kubernetes server
 * pod's is reported ("http://10.1.2.3:8888/?token=T", "http://[fd00::5]:
 * 8888/..."): 0, or -1 when it is not one. */
static int pod_address(const char *url, char *addr, size_t len, int *port)
{
	const char *h = strncmp(url, "http://", 7) == 0 ? url + 7 : NULL;
	const char *end, *colon;
	char *e;
	long p;

	if (!h)
		return -1;
	if (*h == '[') {
		h++;
		end = strchr(h, ']');
		colon = end && end[1] == ':' ? end + 1 : NULL;
	} else {
		end = colon = strchr(h, ':');
	}
	if (!end || !colon || (size_t)(end - h) >= len || end == h)
		return -1;
	errno = 0;
	p = strtol(colon + 1, &e, 10);
	if (errno || e == colon + 1 || *e != '/' || p < 1 || p > 65535)
		return -1;
	snprintf(addr, len, "%.*s", (int)(end - h), h);
	*port = (int)p;
	return 0;
}

/*
 * Queue a tunnel to the running server c->server for c->user, a port
 * tunnel or (@command, taken) an exec, or ssh (the caller gives it its
 * keys): 0 with it in *@ret,
 * in the list, the agents' polls woken (a server in a Kubernetes pod: a
 * direct one, for cnlabd to connect to the pod, or to exec or ssh in it
 * through the API server); or -1 with 409 (stopped), 503 (not running
 * yet) or 429 (too many open) in
 * @resp.  Under the lock.
 */
static int tunnel_queue(struct call *c, struct cnl_http_response *resp,
                        json_t *command, struct cnl_api_tunnel **ret)
{
	struct cnl_api *api = c->api;
	const struct cnl_store_server *v = &c->server;
	struct cnl_api_tunnel *t;
	char node[CNL_ID_MAX], name[CNL_STORE_NAME_MAX], addr[64] = "";
	int per_user = 0, per_server = 0, port = 0;

	if (strcmp(v->state, "stopped") == 0 ||
	    strcmp(v->state, "failed") == 0) {
		cnl_http_error(resp, 409, "conflict",
		               "server %s is %s: start it with `cnlab server "
		               "start %s`",
		               v->name, v->state, v->name);
		goto refuse;
	}
	if (strcmp(v->state, "running") != 0 ||
	    cnl_ctl_workload_node(api->ctl, v->id, node) < 0) {
		cnl_http_error(resp, 503, "unavailable",
		               "server %s is %s, not running: try again "
		               "shortly",
		               v->name, v->state);
		resp->headers = cnl_xstrdup("Retry-After: 2\r\n");
		goto refuse;
	}
	/* A Kubernetes node's server is a pod that cnlabd reaches itself at
	 * the address its scheduler reported: only for nodes whose
	 * credential that scheduler minted (cnl_api_node_mint), which it
	 * alone holds; an agent's report is never an address to dial. */
	if (cnl_ctl_node_name(api->ctl, node, name, sizeof(name)) == 0 &&
	    json_object_get(api->kube_nodes, name)) {
		if (pod_address(v->url, addr, sizeof(addr), &port) < 0) {
			cnl_http_error(
			    resp, 503, "unavailable",
			    "server %s has no address yet: try again "
			    "shortly",
			    v->name);
			resp->headers = cnl_xstrdup("Retry-After: 2\r\n");
			goto refuse;
		}
	}
	for (t = api->tunnels; t; t = t->next) {
		per_user += strcmp(t->user, c->user.id) == 0;
		per_server += strcmp(t->workload, v->id) == 0;
	}
	if (per_user >= CNL_PROXY_PER_USER ||
	    per_server >= CNL_PROXY_PER_SERVER) {
		cnl_http_error(
		    resp, 429, "too_many_connections",
		    "%d connections are open to server %s (at most "
		    "%d per user and %d per server)",
		    per_user >= CNL_PROXY_PER_USER ? per_user : per_server,
		    v->name, CNL_PROXY_PER_USER, CNL_PROXY_PER_SERVER);
		goto refuse;
	}
	t = cnl_xcalloc(1, sizeof(*t));
	if (cnl_api_new_id(c, "tun", t->id) < 0) {
		free(t);
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto refuse;
	}
	t->fd = -1;
	t->command = command;
	t->direct = port > 0;
	snprintf(t->addr, sizeof(t->addr), "%s", addr);
	t->port = port;
	snprintf(t->node, sizeof(t->node), "%s", node);
	snprintf(t->workload, sizeof(t->workload), "%s", v->id);
	snprintf(t->user, sizeof(t->user), "%s", c->user.id);
	t->next = api->tunnels;
	api->tunnels = t;
	if (!t->direct)
		pthread_cond_broadcast(&api->tun_cv);
	*ret = t;
	return 0;
refuse:
	json_decref(command);
	return -1;
}

/* Wait until the agent opens @t (tunnel_upgraded wakes us) or
 * CNL_PROXY_OPEN_MS pass: whether it did.  Under the lock. */
static bool tunnel_wait(struct cnl_api *api, struct cnl_api_tunnel *t)
{
	int64_t deadline = cnl_time_now_ms() + CNL_PROXY_OPEN_MS;
	struct timespec ts;

	while (!t->opened && cnl_time_now_ms() < deadline &&
	       !atomic_load(&api->proxy_stop)) {
		cnl_time_deadline(&ts, CLOCK_REALTIME,
		                  deadline - cnl_time_now_ms());
		pthread_cond_timedwait(&api->tun_cv, &api->mu, &ts);
	}
	return t->opened;
}

/* Direct tunnel @t is open on @fd (cnlabd's own connection, or a relay
 * from the API server): released with it.  Without the lock. */
static void tunnel_set_open(struct cnl_api *api, struct cnl_api_tunnel *t,
                            int fd)
{
	pthread_mutex_lock(&api->mu);
	t->fd = fd;
	t->opened = true;
	pthread_mutex_unlock(&api->mu);
}

/* Connect to direct tunnel @t's pod, within CNL_PROXY_OPEN_MS: whether it
 * answered.  Without the lock. */
static bool direct_open(struct cnl_api *api, struct cnl_api_tunnel *t)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char port[16];
	int fd = -1, err = 0;
	socklen_t elen = sizeof(err);

	snprintf(port, sizeof(port), "%d", t->port);
	if (getaddrinfo(t->addr, port, &hints, &ai) != 0 || !ai)
		return false;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	            0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 &&
	    (errno != EINPROGRESS ||
	     !wait_fd(api, fd, POLLOUT, CNL_PROXY_OPEN_MS) ||
	     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return false;
	tunnel_set_open(api, t, fd);
	return true;
}

/* ---- the proxy ----------------------------------------------------- */

struct pass {
	struct cnl_api *api;
	struct cnl_api_tunnel *t;
	bool ws;
	bool failed; /* the body could not go up */
	char set_cookie[CNL_AUTH_JWT_MAX + 256];
	char server_name[CNL_STORE_NAME_MAX];
	/* Who opened it, asked again while a WebSocket or exec relays
	 * (relay_allowed()): the credential, the proxy cookie's claims
	 * (jti "" when none), and the server's project. */
	struct cnl_api_grant grant;
	struct cnl_auth_claims cookie;
	char project[CNL_ID_MAX];
	/* ssh: the fingerprints of the keys its sshd authorised (a removed
	 * one ends it); NULL otherwise. */
	json_t *ssh_fps;
	/* The server's reply: bytes read past its head. */
	char *buf;
	size_t n, off;
};

static void pass_free(void *state)
{
	struct pass *p = state;

	if (!p)
		return;
	tunnel_release(p->api, p->t);
	json_decref(p->ssh_fps);
	free(p->buf);
	free(p);
}

/* A header that is the connection's (hop by hop) or ours, never sent on. */
static bool hop_header(const char *name)
{
	static const char *const drop[] = {"Connection",
	                                   "Keep-Alive",
	                                   "Proxy-Authorization",
	                                   "Proxy-Authenticate",
	                                   "Proxy-Connection",
	                                   "TE",
	                                   "Trailer",
	                                   "Transfer-Encoding",
	                                   "Upgrade",
	                                   "Authorization"};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(drop); i++)
		if (strcasecmp(name, drop[i]) == 0)
			return true;
	return false;
}

/* Whether the cookie "@s..." (@len bytes, "name=value") is one of
 * cnlabd's: the proxy's, the dashboard's session, the OIDC sign-in's.  A
 * tenant's server sees none of them. */
static bool cookie_ours(const char *s, size_t len)
{
	static const char *const ours[] = {COOKIE_NAME, CNL_API_UI_COOKIE,
	                                   CNL_API_UI_COOKIE_TLS,
	                                   CNL_API_OIDC_COOKIE};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(ours); i++) {
		size_t nl = strlen(ours[i]);

		if (len > nl && strncmp(s, ours[i], nl) == 0 && s[nl] == '=')
			return true;
	}
	return false;
}

/*
 * Whether a tenant's "Set-Cookie: @v" is kept from the browser: one that
 * names a cookie of cnlabd's (cookie_ours; compared without case, a
 * browser may not) would toss or fix a session of ours, and one with a
 * Domain attribute would reach other hosts (and ports: cookies ignore
 * them) than the notebook origin's.  A host-only cookie of the server's
 * own goes through.
 */
static bool set_cookie_refused(const char *v)
{
	static const char *const ours[] = {COOKIE_NAME, CNL_API_UI_COOKIE,
	                                   CNL_API_UI_COOKIE_TLS,
	                                   CNL_API_OIDC_COOKIE};
	size_t n;

	while (*v == ' ' || *v == '\t')
		v++;
	n = strcspn(v, "=;");
	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(ours); i++)
		if (n == strlen(ours[i]) && strncasecmp(v, ours[i], n) == 0)
			return true;
	for (const char *a = strchr(v, ';'); a; a = strchr(a + 1, ';')) {
		const char *k = a + 1;

		while (*k == ' ' || *k == '\t')
			k++;
		if (strncasecmp(k, "domain", 6) == 0 &&
		    (k[6] == '=' || k[6] == ' ' || k[6] == '\t' ||
		     k[6] == ';' || k[6] == '\0'))
			return true;
	}
	return false;
}

/* The Cookie header @v without cnlabd's cookies, into @b ("" when
 * nothing is left). */
static void cookies_without_ours(const char *v, struct cnl_metrics_buf *b)
{
	while (*v) {
		const char *semi = strchr(v, ';');
		size_t len = semi ? (size_t)(semi - v) : strlen(v);
		const char *s = v;

		while (len && (*s == ' ' || *s == '\t')) {
			s++;
			len--;
		}
		if (len && !cookie_ours(s, len))
			cnl_mb_printf(b, "%s%.*s", b->n ? "; " : "", (int)len,
			              s);
		v += len + (size_t)(s - v) + (semi ? 1 : 0);
		if (!semi)
			break;
	}
}

/* Our session cookie's value in the Cookie header @v, into @out. */
static bool cookie_get(const char *v, char *out, size_t outlen)
{
	size_t nl = strlen(COOKIE_NAME);

	for (const char *s = v; s && *s;) {
		while (*s == ' ' || *s == '\t' || *s == ';')
			s++;
		if (strncmp(s, COOKIE_NAME "=", nl + 1) == 0) {
			size_t len = strcspn(s + nl + 1, ";");

			if (len >= outlen)
				return false;
			memcpy(out, s + nl + 1, len);
			out[len] = '\0';
			return true;
		}
		s = strchr(s, ';');
	}
	return false;
}

/* The request target @uri without a "token" query argument. */
static void uri_without_token(const char *uri, struct cnl_metrics_buf *b)
{
	const char *q = strchr(uri, '?');
	bool first = true;

	if (!q) {
		cnl_mb_printf(b, "%s", uri);
		return;
	}
	cnl_mb_printf(b, "%.*s", (int)(q - uri), uri);
	for (const char *a = q + 1; *a;) {
		size_t len = strcspn(a, "&");

		if (len && !(strncmp(a, "token=", 6) == 0 ||
		             (len == 5 && strncmp(a, "token", 5) == 0))) {
			cnl_mb_printf(b, "%c%.*s", first ? '?' : '&', (int)len,
			              a);
			first = false;
		}
		a += len + (a[len] == '&');
	}
}

/* The server's own token, from the URL its agent reported. */
static void server_token(const struct cnl_store_server *v, char *out,
                         size_t outlen)
{
	const char *t = strstr(v->url, "token=");

	out[0] = '\0';
	if (t)
		snprintf(out, outlen, "%.*s", (int)strcspn(t + 6, "&#"), t + 6);
}

struct head_ctx {
	struct cnl_metrics_buf *b;
	bool ws;
};

static void head_add(void *arg, const char *name, const char *value)
{
	struct head_ctx *h = arg;

	if (hop_header(name))
		return;
	if (strcasecmp(name, "Cookie") == 0) {
		struct cnl_metrics_buf rest = {0};

		cookies_without_ours(value, &rest);
		if (rest.n)
			cnl_mb_printf(h->b, "Cookie: %s\r\n", rest.p);
		free(rest.p);
		return;
	}
	/* A header line holds no line break (libmicrohttpd refuses them),
	 * so each goes as it came. */
	cnl_mb_printf(h->b, "%s: %s\r\n", name, value);
}

/*
 * Who the request's credential names, for the server @v: sets c->user (and
 * c->is_admin).  0, or -1 with a 401 in @resp.  @ret_exchanged: the
 * server's token was used (a cookie is to be set).
 */
static int proxy_identify(struct call *c, struct cnl_http_request *req,
                          struct cnl_http_response *resp,
                          const struct cnl_store_server *v, bool *ret_exchanged,
                          struct cnl_auth_claims *ret_cookie)
{
	const char *authz = cnl_http_header(req, "Authorization");
	const char *cookies = cnl_http_header(req, "Cookie");
	const char *qtok = cnl_http_query(req, "token");
	char value[CNL_AUTH_JWT_MAX + 1], aud[CNL_AUTH_CLAIM_MAX];
	struct cnl_auth_claims claims;
	int r;

	*ret_exchanged = false;
	if (authz)
		return cnl_api_authenticate(c, req, resp);
	snprintf(aud, sizeof(aud), "cnlab-proxy:%s", v->id);
	/* Its stored document is what logout and enable delete; an ended
	 * cookie still in the browser gives way to a ?token= beside it. */
	if (cookies && cookie_get(cookies, value, sizeof(value)) &&
	    cnl_auth_jwt_verify(value, c->api->key, c->api->keylen, aud,
	                        c->now_ms / 1000, &claims) == 0 &&
	    cnl_api_proxy_cookie_live(c, &claims) == 0) {
		*ret_cookie = claims;
		r = cnl_store_user_get(c->api->store, claims.sub, &c->user);
	} else if (qtok && qtok[0]) {
		char want[64];

		server_token(v, want, sizeof(want));
		if (!want[0] || strlen(want) != strlen(qtok) ||
		    CRYPTO_memcmp(want, qtok, strlen(want)) != 0) {
			cnl_http_error(resp, 401, "unauthenticated",
			               "the token in the URL is not server "
			               "%s's (a restart gives a new one: see "
			               "`cnlab server open %s`)",
			               v->name, v->name);
			return -1;
		}
		r = cnl_store_user_get(c->api->store, v->user_id, &c->user);
		*ret_exchanged = true;
	} else {
		cnl_http_error(resp, 401, "unauthenticated",
		               "no credential: open the URL `cnlab server open "
		               "%s` prints, or send the API's bearer token",
		               v->name);
		return -1;
	}
	if (r < 0) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "the session's user no longer exists");
		return -1;
	}
	c->authed = true;
	snprintf(c->actor, sizeof(c->actor), "%s", c->user.id);
	return cnl_api_authenticate_role(c, resp);
}

/* Check the request and queue its tunnel: 0 with p->t queued, or -1 with
 * the answer in @resp.  Under the API's lock. */
static int proxy_admit(struct call *c, struct pass *p,
                       struct cnl_http_request *req,
                       struct cnl_http_response *resp, const char *sid)
{
	struct cnl_api *api = c->api;
	struct cnl_store_server *v = &c->server;
	char role[CNL_STORE_ROLE_MAX];
	bool exchanged;
	int r;

	if (!cnl_http_header(req, "Authorization") &&
	    !cnl_http_header(req, "Cookie") && !cnl_http_query(req, "token")) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "no credential: open the URL `cnlab server open "
		               "NAME` prints, or send the API's bearer token");
		return -1;
	}
	r = cnl_store_server_get(api->store, sid, v);
	if (r < 0) {
		cnl_http_error(resp, 404, "not_found", "no server %s", sid);
		return -1;
	}
	snprintf(p->server_name, sizeof(p->server_name), "%s", v->name);
	if (proxy_identify(c, req, resp, v, &exchanged, &p->cookie) < 0)
		return -1;
	if (!c->is_admin) {
		r = cnl_store_membership_get_role(
		    api->store, c->user.id, v->project_id, role, sizeof(role));
		if (r < 0) {
			cnl_http_error(resp, 403, "forbidden",
			               "%s is not a member of the project of "
			               "server %s",
			               c->user.name, v->name);
			return -1;
		}
		if (cnl_api_role_rank(role) < 2) {
			cnl_http_error(resp, 403, "forbidden",
			               "role \"%s\" may not use server %s (a "
			               "member may)",
			               role, v->name);
			return -1;
		}
	}
	if (strcmp(c->user.id, v->user_id) != 0 &&
	    cnl_api_server_private(api->store, v->id)) {
		cnl_http_error(resp, 403, "forbidden",
		               "server %s holds its owner's own secrets: only "
		               "its owner may open it",
		               v->name);
		return -1;
	}
	if (tunnel_queue(c, resp, NULL, &p->t) < 0)
		return -1;
	cnl_api_grant_of(c, &p->grant);
	snprintf(p->project, sizeof(p->project), "%s", v->project_id);
	if (exchanged) {
		struct cnl_auth_claims cl = {0};
		char jwt[CNL_AUTH_JWT_MAX + 1];

		snprintf(cl.sub, sizeof(cl.sub), "%s", c->user.id);
		snprintf(cl.aud, sizeof(cl.aud), "cnlab-proxy:%s", v->id);
		cl.iat = c->now_ms / 1000;
		cl.exp = cl.iat + COOKIE_TTL_S;
		if (cnl_api_proxy_cookie_new(c, c->user.id, v->id,
		                             cl.exp * 1000, cl.jti) == 0 &&
		    cnl_auth_jwt_sign(&cl, api->key, api->keylen, jwt,
		                      sizeof(jwt)) > 0)
			snprintf(p->set_cookie, sizeof(p->set_cookie),
			         "Set-Cookie: %s=%s; HttpOnly; "
			         "SameSite=Strict; Path=/s/%s/%s\r\n",
			         COOKIE_NAME, jwt, v->id,
			         api->tls ? "; Secure" : "");
	}
	return 0;
}

static int pass_open(void *ud, struct cnl_http_request *req,
                     struct cnl_http_response *resp, void **ret_state)
{
	struct cnl_api *api = ud;
	struct call c = {0};
	struct pass *p = cnl_xcalloc(1, sizeof(*p));
	struct cnl_metrics_buf h = {0}, uri = {0};
	const char *up = cnl_http_header(req, "Upgrade");
	const char *te = cnl_http_header(req, "Transfer-Encoding");
	char sid[CNL_ID_MAX], token[64];
	const char *s = req->path + 3, *slash = strchr(s, '/');
	size_t len = slash ? (size_t)(slash - s) : strlen(s);
	bool ok;

	p->api = api;
	if (len == 0 || len >= sizeof(sid)) {
		cnl_http_error(resp, 404, "not_found",
		               "the proxy's paths are /s/SERVER-ID/...");
		goto refuse;
	}
	memcpy(sid, s, len);
	sid[len] = '\0';
	if (!slash) {
		/* The server's pages are relative to /s/ID/. */
		char loc[CNL_ID_MAX + 80];

		snprintf(loc, sizeof(loc), "Location: /s/%s/\r\n", sid);
		cnl_http_error(resp, 308, "moved", "the server is at /s/%s/",
		               sid);
		resp->headers = cnl_xstrdup(loc);
		goto refuse;
	}
	p->ws = up && strcasecmp(up, "websocket") == 0;
	/* A body goes up with its length and nothing else (HTTP/1.0): one
	 * framed otherwise, or two ways at once, is refused rather than
	 * guessed at. */
	if (!p->ws && te) {
		cnl_http_error(resp, 411, "length_required",
		               "the proxy sends a body on only with its "
		               "Content-Length, not Transfer-Encoding");
		goto refuse;
	}
	c.api = api;
	c.st = api->store;
	c.now_ms = cnl_time_now_ms();
	cnl_api_oidc_check(&c, req);
	pthread_mutex_lock(&api->mu);
	ok = proxy_admit(&c, p, req, resp, sid) == 0;
	if (!ok) {
		pthread_mutex_unlock(&api->mu);
		goto refuse;
	}
	server_token(&c.server, token, sizeof(token));
	if (p->t->direct) {
		pthread_mutex_unlock(&api->mu);
		ok = direct_open(api, p->t);
	} else {
		ok = tunnel_wait(api, p->t);
		pthread_mutex_unlock(&api->mu);
	}
	if (!ok && p->t->direct) {
		cnl_log(CNL_LOG_WARN, "server pod does not answer",
		        "server=%s node=%s", sid, p->t->node);
		cnl_http_error(resp, 502, "bad_gateway",
		               "the pod of server %s (node %s) did not answer "
		               "within %d s",
		               p->server_name, p->t->node,
		               CNL_PROXY_OPEN_MS / 1000);
		goto refuse;
	}
	if (!ok) {
		cnl_log(CNL_LOG_WARN, "tunnel not opened", "server=%s node=%s",
		        sid, p->t->node);
		cnl_http_error(resp, 504, "gateway_timeout",
		               "the node agent of server %s (node %s) did not "
		               "open a tunnel within %d s: is the node up?",
		               p->server_name, p->t->node,
		               CNL_PROXY_OPEN_MS / 1000);
		goto refuse;
	}
	/* The request's head, as the server is to see it. */
	uri_without_token(req->uri, &uri);
	cnl_mb_printf(&h, "%s %s HTTP/%s\r\n", req->method, uri.p,
	              p->ws ? "1.1" : "1.0");
	cnl_http_headers_each(req, head_add, &(struct head_ctx){&h, p->ws});
	if (p->ws)
		cnl_mb_printf(&h, "Connection: Upgrade\r\nUpgrade: %s\r\n", up);
	else
		cnl_mb_printf(&h, "Connection: close\r\n");
	if (token[0])
		cnl_mb_printf(&h, "Authorization: token %s\r\n", token);
	cnl_mb_printf(&h, "\r\n");
	ok = write_all(api, p->t->fd, h.p, h.n) == 0;
	free(h.p);
	free(uri.p);
	if (!ok) {
		cnl_http_error(resp, 502, "bad_gateway",
		               "the tunnel to server %s closed at once",
		               p->server_name);
		goto refuse;
	}
	*ret_state = p;
	return 0;
refuse:
	pass_free(p);
	return -1;
}

static int pass_body(void *state, const char *data, size_t n)
{
	struct pass *p = state;

	if (p->failed || write_all(p->api, p->t->fd, data, n) < 0) {
		p->failed = true;
		return -1;
	}
	return 0;
}

/* The reply's body: what came past its head, then the tunnel. */
static ssize_t body_read(void *arg, char *buf, size_t max)
{
	struct pass *p = arg;

	if (p->off < p->n) {
		size_t k = p->n - p->off < max ? p->n - p->off : max;

		memcpy(buf, p->buf + p->off, k);
		p->off += k;
		return (ssize_t)k;
	}
	return read_some(p->api, p->t->fd, buf, max);
}

/* ---- WebSocket relay ----------------------------------------------- */

struct ws {
	struct pass *p;
	int fd; /* the browser's */
	struct cnl_http_upgrade *u;
	char *extra; /* the browser's bytes read past its request */
	size_t extra_n;
};

/* Is the one who opened @p still a member (or above) of the server's
 * project, with the same credential live (not logged out, revoked or
 * disabled)?  Takes the API's lock. */
static bool relay_allowed(struct pass *p)
{
	struct cnl_api *api = p->api;
	struct call c = {.api = api, .now_ms = cnl_time_now_ms()};
	char role[CNL_STORE_ROLE_MAX];
	bool ok;

	pthread_mutex_lock(&api->mu);
	c.st = api->store;
	ok = cnl_api_grant_live(&c, &p->grant) == 0 &&
	     (!p->cookie.jti[0] ||
	      cnl_api_proxy_cookie_live(&c, &p->cookie) == 0) &&
	     (!p->ssh_fps ||
	      cnl_api_ssh_keys_live(c.st, p->grant.user_id, p->ssh_fps)) &&
	     (c.is_admin ||
	      (cnl_store_membership_get_role(c.st, c.user.id, p->project, role,
	                                     sizeof(role)) == 0 &&
	       cnl_api_role_rank(role) >= 2));
	pthread_mutex_unlock(&api->mu);
	return ok;
}

/* Both ways between @a and @b until either ends, or the one who opened
 * @p may no longer (asked after each authentication-relevant change, and
 * at least every REAUTH_MS). */
static void relay(struct pass *p, int a, int b)
{
	struct cnl_api *api = p->api;
	struct pollfd pf[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
	uint64_t gen = cnl_api_dash_auth_gen(api);
	int64_t checked = cnl_time_mono_ns() / 1000000;
	char buf[65536];

	while (!atomic_load(&api->proxy_stop)) {
		uint64_t g = cnl_api_dash_auth_gen(api);
		int64_t now = cnl_time_mono_ns() / 1000000;

		if (g != gen || now - checked >= REAUTH_MS) {
			if (!relay_allowed(p)) {
				cnl_log(CNL_LOG_INFO, "relay cut",
				        "server=%s user=%s why=credential or "
				        "membership revoked",
				        p->server_name, p->grant.user_id);
				return;
			}
			gen = g;
			checked = now;
		}
		if (poll(pf, 2, 1000) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = recv(pf[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0 ||
			    write_all(api, pf[1 - i].fd, buf, (size_t)n) < 0)
				return;
		}
	}
}

/* The end of a relay's thread: the caller's connection closed, the
 * tunnel released. */
static void ws_done(struct ws *w)
{
	cnl_http_upgrade_close(w->u);
	pass_free(w->p);
	free(w->extra);
	free(w);
}

static void *ws_thread(void *arg)
{
	struct ws *w = arg;
	struct pass *p = w->p;

	if ((!w->extra_n ||
	     write_all(p->api, p->t->fd, w->extra, w->extra_n) == 0) &&
	    (p->off >= p->n ||
	     write_all(p->api, w->fd, p->buf + p->off, p->n - p->off) == 0))
		relay(p, w->fd, p->t->fd);
	ws_done(w);
	return NULL;
}

/* A 101 went to the caller (@fd, with @n bytes it sent past its request):
 * @fn relays it on a thread of its own. */
static void ws_start(void *arg, int fd, const char *extra, size_t n,
                     struct cnl_http_upgrade *u, void *(*fn)(void *))
{
	struct ws *w = cnl_xcalloc(1, sizeof(*w));
	pthread_attr_t at;
	pthread_t t;

	w->p = arg;
	w->fd = fd;
	w->u = u;
	if (n) {
		w->extra = cnl_xmalloc(n);
		memcpy(w->extra, extra, n);
		w->extra_n = n;
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, fn, w) != 0)
		ws_done(w);
	pthread_attr_destroy(&at);
}

static void ws_upgraded(void *arg, int fd, const char *extra, size_t n,
                        struct cnl_http_upgrade *u)
{
	ws_start(arg, fd, extra, n, u, ws_thread);
}

/*
 * The exec of direct tunnel p->t in its server's pod, through the API
 * server (cnl_api_set_kube_exec), relayed to the caller on @fd; what
 * kept it from starting goes to the caller as exec frames (a stderr line,
 * then exit 126: the command could not be run).
 */
static void *kexec_thread(void *arg)
{
	struct ws *w = arg;
	struct pass *p = w->p;
	struct cnl_api *api = p->api;
	const char *argv[CNL_WIRE_EXEC_ARGS];
	size_t argc = json_array_size(p->t->command);
	char why[512] = "exec in Kubernetes pods is not set up in this cnlabd";
	int fd = -1, r = -1;

	for (size_t i = 0; i < argc && i < CNL_WIRE_EXEC_ARGS; i++)
		argv[i] = json_string_value(json_array_get(p->t->command, i));
	pthread_rwlock_rdlock(&api->collect_rw);
	if (api->kube_exec && argc <= CNL_WIRE_EXEC_ARGS)
		r = api->kube_exec(api->kube_exec_ud, p->t->workload, argv,
		                   argc, &fd, why, sizeof(why));
	pthread_rwlock_unlock(&api->collect_rw);
	if (r == 0) {
		tunnel_set_open(api, p->t, fd);
		relay(p, w->fd, fd);
	} else {
		struct cnl_metrics_buf b = {0};
		unsigned char h[5], code[4];

		cnl_log(CNL_LOG_WARN, "exec in a server's pod not started",
		        "server=%s err=%s", p->t->workload, why);
		cnl_mb_printf(&b, "cnlab: server %s: %s\n", p->server_name,
		              why);
		cnl_wire_exec_head(h, CNL_WIRE_EXEC_STDERR, (uint32_t)b.n);
		cnl_wire_exec_code(code, 126);
		if (write_all(api, w->fd, (const char *)h, 5) == 0 &&
		    write_all(api, w->fd, b.p, b.n) == 0) {
			cnl_wire_exec_head(h, CNL_WIRE_EXEC_EXIT, 4);
			if (write_all(api, w->fd, (const char *)h, 5) == 0)
				(void)write_all(api, w->fd, (const char *)code,
				                4);
		}
		free(b.p);
	}
	ws_done(w);
	return NULL;
}

/* What the caller sent past its request is not read: the command has no
 * stdin. */
static void kexec_upgraded(void *arg, int fd, const char *extra, size_t n,
                           struct cnl_http_upgrade *u)
{
	ws_start(arg, fd, extra, n, u, kexec_thread);
}

/*
 * The ssh session of direct tunnel p->t in its server's pod, through the
 * API server (cnl_api_set_kube_ssh), relayed to the caller on @fd as it
 * is, what the caller sent past its request first; what kept it from
 * starting goes to the caller as a line of text (ssh-proxy shows a
 * stream that does not begin as SSH's on its stderr).
 */
static void *kssh_thread(void *arg)
{
	struct ws *w = arg;
	struct pass *p = w->p;
	struct cnl_api *api = p->api;
	char why[512] = "ssh in Kubernetes pods is not set up in this cnlabd";
	int fd = -1, r = -1;

	pthread_rwlock_rdlock(&api->collect_rw);
	if (api->kube_ssh)
		r = api->kube_ssh(api->kube_ssh_ud, p->t->workload,
		                  p->t->ssh_host_key, p->t->ssh_keys, &fd, why,
		                  sizeof(why));
	pthread_rwlock_unlock(&api->collect_rw);
	if (r == 0) {
		tunnel_set_open(api, p->t, fd);
		if (!w->extra_n ||
		    write_all(api, fd, w->extra, w->extra_n) == 0)
			relay(p, w->fd, fd);
	} else {
		struct cnl_metrics_buf b = {0};

		cnl_log(CNL_LOG_WARN, "ssh in a server's pod not started",
		        "server=%s err=%s", p->t->workload, why);
		cnl_mb_printf(&b, "cnlab: server %s: %s\n", p->server_name,
		              why);
		(void)write_all(api, w->fd, b.p, b.n);
		free(b.p);
	}
	ws_done(w);
	return NULL;
}

static void kssh_upgraded(void *arg, int fd, const char *extra, size_t n,
                          struct cnl_http_upgrade *u)
{
	ws_start(arg, fd, extra, n, u, kssh_thread);
}

/* ---- the reply ----------------------------------------------------- */

/* Read the head of the server's reply into p->buf: its length, or -1. */
static ssize_t read_head(struct pass *p)
{
	p->buf = cnl_xmalloc(HEAD_MAX + 1);
	for (;;) {
		char *end;
		ssize_t r;

		if (p->n >= HEAD_MAX)
			return -1;
		r = read_some(p->api, p->t->fd, p->buf + p->n, HEAD_MAX - p->n);
		if (r <= 0)
			return -1;
		p->n += (size_t)r;
		p->buf[p->n] = '\0';
		if ((end = strstr(p->buf, "\r\n\r\n")))
			return end + 4 - p->buf;
	}
}

static void pass_end(void *state, struct cnl_http_request *req,
                     struct cnl_http_response *resp)
{
	struct pass *p = state;
	struct cnl_metrics_buf hdr = {0};
	int64_t length = -1;
	ssize_t hl = read_head(p);
	int status = 0;
	char *line;

	if (p->failed || hl < 0 ||
	    sscanf(p->buf, "HTTP/%*d.%*d %d", &status) != 1 || status < 100 ||
	    status > 599) {
		cnl_http_error(resp, 502, "bad_gateway",
		               "server %s did not answer (is its notebook "
		               "listening on $CNLAB_PORT?)",
		               p->server_name);
		pass_free(p);
		return;
	}
	p->buf[hl - 2] = '\0';
	line = strstr(p->buf, "\r\n");
	for (line = line ? line + 2 : NULL; line && *line;) {
		char *eol = strstr(line, "\r\n"), *colon;

		if (eol)
			*eol = '\0';
		colon = strchr(line, ':');
		if (colon) {
			*colon = '\0';
			const char *v = colon + 1;

			while (*v == ' ' || *v == '\t')
				v++;
			if (strcasecmp(line, "Content-Length") == 0)
				length = strtoll(v, NULL, 10);
			else if (strcasecmp(line, "Set-Cookie") == 0 &&
			         set_cookie_refused(v))
				cnl_log(CNL_LOG_WARN,
				        "a server's Set-Cookie dropped",
				        "server=%s", p->server_name);
			else if (!hop_header(line) ||
			         (p->ws && status == 101 &&
			          strcasecmp(line, "Upgrade") == 0))
				cnl_mb_printf(&hdr, "%s: %s\r\n", line, v);
		}
		line = eol ? eol + 2 : NULL;
	}
	if (p->set_cookie[0])
		cnl_mb_printf(&hdr, "%s", p->set_cookie);
	p->off = (size_t)hl;
	resp->status = (unsigned)status;
	resp->headers = hdr.p;
	resp->no_defaults = true;
	if (p->ws && status == 101) {
		resp->upgraded = ws_upgraded;
		resp->upgrade_free = pass_free;
		resp->upgrade_arg = p;
	} else {
		resp->stream_read = body_read;
		resp->stream_free = pass_free;
		resp->stream_arg = p;
		resp->stream_size = status == 204 || status == 304 ? 0 : length;
	}
}

/* ---- cnlab server exec ---------------------------------------------- */

/*
 * POST /v1/servers/{server}/exec?command=["ls","-l"] with "Connection:
 * Upgrade", "Upgrade: cnlab-exec" (a member of the server's project; the
 * route is audited with the command's first word): a tunnel with the
 * command goes to the server's node, whose agent runs it in the server's
 * container and answers in exec frames (wire/node.h), which the 101 here
 * relays to the caller as they come.
 */
void cnl_api_h_server_exec(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_api *api = c->api;
	const char *up = cnl_http_header(req, "Upgrade");
	const char *q = cnl_http_query(req, "command");
	char err[256];
	json_t *cmd;
	struct pass *p;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (!up || strcasecmp(up, "cnlab-exec") != 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "exec is opened with \"Connection: Upgrade\" "
		               "and \"Upgrade: cnlab-exec\"");
		return;
	}
	cmd = q ? json_loads(q, 0, NULL) : NULL;
	if (!cmd || cnl_wire_exec_check(cmd, err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "query \"command\": %s",
		               cmd ? err
		                   : "a JSON array of strings, the command and "
		                     "its arguments");
		json_decref(cmd);
		return;
	}
	if (strcmp(c->user.id, c->server.user_id) != 0 &&
	    cnl_api_server_private(api->store, c->server.id)) {
		cnl_http_error(resp, 403, "forbidden",
		               "server %s holds its owner's own secrets: only "
		               "its owner may run commands in it",
		               c->server.name);
		json_decref(cmd);
		return;
	}
	/* The audit record names what ran (its first word; the rest may be
	 * anything the user typed). */
	snprintf(c->target, sizeof(c->target), "%s: %.*s", c->server.id, 64,
	         json_string_value(json_array_get(cmd, 0)));
	p = cnl_xcalloc(1, sizeof(*p));
	p->api = api;
	snprintf(p->server_name, sizeof(p->server_name), "%s", c->server.name);
	cnl_api_grant_of(c, &p->grant);
	snprintf(p->project, sizeof(p->project), "%s", c->server.project_id);
	if (tunnel_queue(c, resp, cmd, &p->t) < 0) {
		free(p);
		return;
	}
	if (p->t->direct) { /* opened by the relay's thread, unlocked */
		resp->status = 101;
		resp->headers = cnl_xstrdup("Upgrade: cnlab-exec\r\n");
		resp->upgraded = kexec_upgraded;
		resp->upgrade_free = pass_free;
		resp->upgrade_arg = p;
		return;
	}
	if (!tunnel_wait(api, p->t)) {
		cnl_http_error(resp, 504, "gateway_timeout",
		               "the node agent of server %s (node %s) did not "
		               "open a tunnel within %d s: is the node up?",
		               p->server_name, p->t->node,
		               CNL_PROXY_OPEN_MS / 1000);
		/* Released without the lock, once the reply is made. */
		resp->upgraded = ws_upgraded;
		resp->upgrade_free = pass_free;
		resp->upgrade_arg = p;
		return;
	}
	resp->status = 101;
	resp->headers = cnl_xstrdup("Upgrade: cnlab-exec\r\n");
	resp->upgraded = ws_upgraded;
	resp->upgrade_free = pass_free;
	resp->upgrade_arg = p;
}

/* ---- cnlab server ssh ----------------------------------------------- */

/*
 * POST /v1/servers/{server}/ssh with "Connection: Upgrade", "Upgrade:
 * cnlab-ssh" (the server's owner only; audited): a tunnel carrying the
 * server's host key and the owner's authorized_keys goes to the server's
 * node, whose agent starts an sshd in inetd mode (sshd -i) in the
 * server's container as the tenant, its stdin and stdout the tunnel; the
 * 101 here relays the SSH protocol both ways until either side ends.
 * Nodes older than CNL_WIRE_PROTOCOL_SSH are not sent such a tunnel.  A
 * server in a Kubernetes pod: the same keys go to an sshd that cnlabd
 * starts there through the API server's exec (kssh_thread).
 */
void cnl_api_h_server_ssh(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_api *api = c->api;
	const char *up = cnl_http_header(req, "Upgrade");
	char *priv = NULL, *keys = NULL;
	json_t *fps = NULL;
	struct pass *p;
	int proto;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (!up || strcasecmp(up, "cnlab-ssh") != 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "ssh is opened with \"Connection: Upgrade\" "
		               "and \"Upgrade: cnlab-ssh\"");
		return;
	}
	if (strcmp(c->user.id, c->server.user_id) != 0) {
		cnl_http_error(resp, 403, "forbidden",
		               "server %s is not yours: only its owner may "
		               "ssh into it",
		               c->server.name);
		return;
	}
	p = cnl_xcalloc(1, sizeof(*p));
	p->api = api;
	snprintf(p->server_name, sizeof(p->server_name), "%s", c->server.name);
	cnl_api_grant_of(c, &p->grant);
	snprintf(p->project, sizeof(p->project), "%s", c->server.project_id);
	if (tunnel_queue(c, resp, NULL, &p->t) < 0) {
		free(p);
		return;
	}
	/* Not listed to the node before it is whole (the lock is held). */
	proto = cnl_ctl_node_protocol(api->ctl, p->t->node);
	if (!p->t->direct && proto < CNL_WIRE_PROTOCOL_SSH) {
		cnl_http_error(resp, 409, "conflict",
		               "server %s runs on node %s, whose agent "
		               "(node protocol %d) is too old for ssh: the "
		               "operator upgrades cnlab-agent there",
		               p->server_name, p->t->node, proto);
		goto fail;
	}
	if (cnl_api_ssh_material(c, resp, &priv, &keys, &fps) < 0)
		goto fail;
	p->t->ssh_host_key = priv;
	p->t->ssh_keys = keys;
	p->ssh_fps = fps;
	if (p->t->direct) { /* opened by the relay's thread, unlocked */
		resp->status = 101;
		resp->headers = cnl_xstrdup("Upgrade: cnlab-ssh\r\n");
		resp->upgraded = kssh_upgraded;
		resp->upgrade_free = pass_free;
		resp->upgrade_arg = p;
		return;
	}
	if (!tunnel_wait(api, p->t)) {
		cnl_http_error(resp, 504, "gateway_timeout",
		               "the node agent of server %s (node %s) did not "
		               "open a tunnel within %d s: is the node up?",
		               p->server_name, p->t->node,
		               CNL_PROXY_OPEN_MS / 1000);
		goto fail;
	}
	resp->status = 101;
	resp->headers = cnl_xstrdup("Upgrade: cnlab-ssh\r\n");
	resp->upgraded = ws_upgraded;
	resp->upgrade_free = pass_free;
	resp->upgrade_arg = p;
	return;
fail:
	p->t->abandoned = true;
	/* Released without the lock, once the reply is made. */
	resp->upgraded = ws_upgraded;
	resp->upgrade_free = pass_free;
	resp->upgrade_arg = p;
}

/* ---- wiring -------------------------------------------------------- */

int cnl_api_notebook_base(struct cnl_api *api, const char *host, char *buf)
{
	unsigned port = atomic_load(&api->nb_port);
	size_t n;

	if (api->notebook_url) {
		snprintf(buf, CNL_API_CLI_URL_MAX, "%s", api->notebook_url);
		return 0;
	}
	if (!port || !cnl_api_cli_valid_host(host))
		return -CNL_EFIELD;
	/* The Host's name without its port: "[v6]:p", "name:p". */
	if (host[0] == '[')
		n = strcspn(host, "]") + 1;
	else
		n = strcspn(host, ":");
	snprintf(buf, CNL_API_CLI_URL_MAX, "%s://%.*s:%u",
	         api->tls ? "https" : "http", (int)n, host, port);
	return 0;
}

/* The notebook listener: /s/ goes to the proxy, anything else (the API,
 * the dashboard, /healthz) is not here. */
static int nb_open(void *ud, struct cnl_http_request *req,
                   struct cnl_http_response *resp, void **ret_state)
{
	if (strncmp(req->path, "/s/", 3) != 0) {
		cnl_http_error(resp, 404, "not_found",
		               "this is the notebook origin: it serves only "
		               "/s/SERVER-ID/...; the API and the dashboard "
		               "are at cnlabd's own address (listen, "
		               "public_url)");
		return -1;
	}
	return pass_open(ud, req, resp, ret_state);
}

/* The API's listener: a tenant's pages never run on the API's origin.
 * A link to /s/... there goes on to the notebook origin. */
static int api_s_open(void *ud, struct cnl_http_request *req,
                      struct cnl_http_response *resp, void **ret_state)
{
	struct cnl_api *api = ud;
	char base[CNL_API_CLI_URL_MAX];
	const char *uri = req->uri ? req->uri : req->path;
	bool clean = strlen(uri) < 2048;

	(void)ret_state;
	for (const char *u = uri; clean && *u; u++)
		if ((unsigned char)*u <= ' ' || *u == 0x7f)
			clean = false;
	if (clean && cnl_api_notebook_base(api, cnl_http_header(req, "Host"),
	                                   base) == 0) {
		struct cnl_metrics_buf loc = {0};

		cnl_mb_printf(&loc, "Location: %s%s\r\n", base, uri);
		cnl_http_error(resp, 308, "moved",
		               "notebooks are served on their own origin, "
		               "%s (notebook_url)",
		               base);
		resp->headers = loc.p;
		return -1;
	}
	cnl_http_error(resp, 404, "not_found",
	               "notebooks are not served on the API's origin but on "
	               "their own (notebook_listen, notebook_url)");
	return -1;
}

/* Never called: api_s_open answers every request itself. */
static int api_s_body(void *state, const char *data, size_t n)
{
	(void)state;
	(void)data;
	(void)n;
	return -1;
}

static void api_s_end(void *state, struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	(void)state;
	(void)req;
	cnl_http_error(resp, 404, "not_found", "no notebooks here");
}

static void api_s_free(void *state)
{
	(void)state;
}

void cnl_api_proxy_config(struct cnl_api *api, struct cnl_http_config *cfg,
                          bool notebooks)
{
	(void)api;
	if (notebooks) {
		cfg->pass_prefix = "/";
		cfg->pass_open = nb_open;
		cfg->pass_body = pass_body;
		cfg->pass_end = pass_end;
		cfg->pass_free = pass_free;
	} else {
		cfg->pass_prefix = "/s/";
		cfg->pass_open = api_s_open;
		cfg->pass_body = api_s_body;
		cfg->pass_end = api_s_end;
		cfg->pass_free = api_s_free;
	}
}
