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
#include <dirent.h>
#include <elf.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/sshd.h"
#include "common/time.h"
#include "common/util.h"

struct one {
	struct cnl_agent *a;
	char tunnel[CNL_WIRE_ID_MAX];
	char id[CNL_WIRE_ID_MAX];
	int port;
	char **argv; /* exec: the command (NULL-ended); NULL: the port */
	size_t argc;
	char *ssh_host_key, *ssh_keys; /* ssh: what its sshd gets */
};

static void one_free(struct one *o)
{
	if (o->ssh_host_key)
		explicit_bzero(o->ssh_host_key, strlen(o->ssh_host_key));
	free(o->ssh_host_key);
	free(o->ssh_keys);
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

/* Bytes both ways between cnlabd's stream @s and the server's @fd: how
 * many came from @fd. */
static size_t relay(struct cnl_agent *a, struct cnl_client_stream *s, int fd)
{
	char buf[65536];
	size_t from_fd = 0;

	while (!a->stop) {
		struct pollfd p[2] = {{cnl_client_stream_fd(s), POLLIN, 0},
		                      {fd, POLLIN, 0}};
		ssize_t n;

		/* What the stream already holds (TLS records, bytes read
		 * with the 101) shows in no poll: take it first. */
		while ((n = cnl_client_stream_read(s, buf, sizeof(buf))) > 0)
			if (write_all(fd, buf, (size_t)n) < 0)
				return from_fd;
		if (n != -EAGAIN)
			return from_fd; /* cnlabd's side ended */
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			return from_fd;
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0 ||
			    cnl_client_stream_write(s, buf, (size_t)n) < 0)
				return from_fd;
			from_fd += (size_t)n;
		}
	}
	return from_fd;
}

/* One exec frame (wire/node.h) to cnlabd; 0 or -1. */
static int frame(struct cnl_client_stream *s, int kind, const char *data,
                 size_t n)
{
	unsigned char h[5];

	cnl_wire_exec_head(h, kind, (uint32_t)n);
	return cnl_client_stream_write(s, (const char *)h, 5) < 0 ||
	               (n && cnl_client_stream_write(s, data, n) < 0)
	           ? -1
	           : 0;
}

static void frame_exit(struct cnl_client_stream *s, int code)
{
	unsigned char c[4];

	cnl_wire_exec_code(c, code);
	frame(s, CNL_WIRE_EXEC_EXIT, (const char *)c, 4);
}

/* The runtime's "exec" into workload @id's container as the tenant, in
 * /workspace, without new privileges: its first arguments in @argv (the
 * state folder's path in @root), their count. */
static int exec_prefix(struct cnl_agent *a, const char *id, char *root,
                       size_t rootlen, const char **argv)
{
	int n = 0;

	snprintf(root, rootlen, "%s/crun", cnl_agent_rundir(a));
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
	argv[n++] = id;
	return n;
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
	n = exec_prefix(a, o->id, root, sizeof(root), argv);
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

/* ---- cnlab server ssh ------------------------------------------------ */

/* Why a session could not begin, to its user: the CLI's ssh-proxy shows a
 * stream that does not start as SSH does ("SSH-") on its stderr. */
static void ssh_say(struct cnl_client_stream *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ssh_say(struct cnl_client_stream *s, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(msg) - 2)
		n = (int)sizeof(msg) - 2;
	msg[n++] = '\n';
	(void)cnl_client_stream_write(s, msg, (size_t)n);
}

/* sshd_config for a session (common/sshd.h), with the container's
 * environment from the bundle's config.json. */
static char *ssh_config(struct cnl_agent *a, const char *id)
{
	char path[700];
	json_t *spec;
	char *text;

	snprintf(path, sizeof(path), "%s/bundles/%s/config.json",
	         cnl_agent_rundir(a), id);
	spec = json_load_file(path, 0, NULL);
	text = cnl_sshd_config(
	    CNL_AGENT_SSH_DIR,
	    json_object_get(json_object_get(spec, "process"), "env"));
	json_decref(spec);
	return text;
}

/* The node sshd's dynamic loader (its ELF program interpreter, links
 * resolved) and that loader's folder, both below /usr and written without
 * it ("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"); "" when the node has
 * no sshd or they are elsewhere. */
static void sshd_loader(char *loader, size_t llen, char *libdir, size_t dlen)
{
	char interp[256] = "", *real = NULL, *slash;
	Elf64_Ehdr eh;
	int fd = open(CNL_AGENT_SSHD, O_RDONLY | O_CLOEXEC);

	loader[0] = libdir[0] = '\0';
	if (fd < 0)
		return;
	if (pread(fd, &eh, sizeof(eh), 0) == sizeof(eh) &&
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 &&
	    eh.e_phentsize == sizeof(Elf64_Phdr))
		for (int i = 0; i < eh.e_phnum && i < 64; i++) {
			Elf64_Phdr ph;

			if (pread(fd, &ph, sizeof(ph),
			          (off_t)(eh.e_phoff +
			                  (uint64_t)i * sizeof(ph))) !=
			    sizeof(ph))
				break;
			if (ph.p_type == PT_INTERP &&
			    ph.p_filesz < sizeof(interp) &&
			    pread(fd, interp, ph.p_filesz,
			          (off_t)ph.p_offset) == (ssize_t)ph.p_filesz) {
				interp[ph.p_filesz] = '\0';
				break;
			}
		}
	close(fd);
	if (interp[0] != '/' || !(real = realpath(interp, NULL)) ||
	    strncmp(real, "/usr/", 5) != 0 || strchr(real, '\'') ||
	    strchr(real, ' ')) {
		free(real);
		return;
	}
	snprintf(loader, llen, "%s", real + 4);
	snprintf(libdir, dlen, "%s", real + 4);
	if ((slash = strrchr(libdir, '/')))
		*slash = '\0';
	free(real);
}

/* SIGHUP to every descendant of @root (not @root itself), found through
 * /proc: the processes of an ssh session whose connection ended. */
static void hangup_tree(pid_t root)
{
	enum { MAX = 8192 };
	pid_t *pids = cnl_xcalloc(MAX, sizeof(*pids));
	pid_t *ppids = cnl_xcalloc(MAX, sizeof(*ppids));
	bool *mark = cnl_xcalloc(MAX, sizeof(*mark));
	size_t n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");
	bool grew = true;

	while (d && n < MAX && (e = readdir(d))) {
		char path[300], buf[512], *rp;
		long pp;
		int fd;
		ssize_t k;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		k = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (k <= 0)
			continue;
		buf[k] = '\0';
		/* "pid (comm) state ppid ...": comm may hold anything. */
		if (!(rp = strrchr(buf, ')')) ||
		    sscanf(rp + 1, " %*c %ld", &pp) != 1)
			continue;
		pids[n] = (pid_t)strtol(e->d_name, NULL, 10);
		ppids[n++] = (pid_t)pp;
	}
	if (d)
		closedir(d);
	while (grew) {
		grew = false;
		for (size_t i = 0; i < n; i++) {
			if (mark[i])
				continue;
			bool child = ppids[i] == root;

			for (size_t j = 0; !child && j < n; j++)
				child = mark[j] && ppids[i] == pids[j];
			if (child)
				mark[i] = grew = true;
		}
	}
	for (size_t i = 0; i < n; i++)
		if (mark[i])
			kill(pids[i], SIGHUP);
	free(pids);
	free(ppids);
	free(mark);
}

/* Run the server's sshd in inetd mode (sshd -i) in its container, as the
 * tenant, its stdin and stdout one end of a socket pair whose other end
 * is relayed to @s.  The image's own /usr/sbin/sshd when it has one,
 * else the node's, through the node's loader and libraries under
 * CNL_AGENT_HOST_USR.  The session ends when either side does; sshd,
 * whose input then ends, exits, and is killed if it has not within 5 s. */
static void ssh_one(struct cnl_agent *a, struct one *o,
                    struct cnl_client_stream *s)
{
	char dir[600], root[600], loader[300] = "", libdir[300] = "";
	char script[2048], errbuf[2048];
	const char *argv[32];
	struct stat st;
	int sp[2] = {-1, -1}, ep[2] = {-1, -1}, n = 0, r, wst = 0;
	size_t got = 0, from_sshd;
	char *cfg = NULL;
	pid_t pid = -1;

	if (a->cfg.bare || !a->runtime[0]) {
		ssh_say(s,
		        "cnlab: node %s runs work without containers "
		        "(isolation bare): ssh is not available there",
		        a->cfg.name);
		return;
	}
	cnl_agent_ssh_dir(a, o->id, dir, sizeof(dir));
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		ssh_say(s, "cnlab: this server was started before its node "
		           "could serve ssh: stop and start it once (cnlab "
		           "server stop, cnlab server start)");
		return;
	}
	cfg = ssh_config(a, o->id);
	if ((r = cnl_agent_ssh_file(dir, "host_key", o->ssh_host_key,
	                            st.st_uid)) < 0 ||
	    (r = cnl_agent_ssh_file(dir, "authorized_keys", o->ssh_keys,
	                            st.st_uid)) < 0 ||
	    (r = cnl_agent_ssh_file(dir, "sshd_config", cfg, st.st_uid)) < 0) {
		free(cfg);
		ssh_say(s, "cnlab: node %s cannot prepare the session: %s",
		        a->cfg.name, strerror(-r));
		return;
	}
	free(cfg);
	/* The node's loader and library folder, for an image without an
	 * sshd of its own (the node's /usr is at CNL_AGENT_HOST_USR). */
	sshd_loader(loader, sizeof(loader), libdir, sizeof(libdir));
	snprintf(script, sizeof(script),
	         "if [ -x " CNL_AGENT_SSHD " ]; then exec " CNL_AGENT_SSHD
	         " \"$@\"; fi; "
	         "if [ -n '%s' ] && [ -x " CNL_AGENT_HOST_USR "/sbin/sshd ]; "
	         "then exec " CNL_AGENT_HOST_USR
	         "%s --library-path " CNL_AGENT_HOST_USR
	         "%s " CNL_AGENT_HOST_USR "/sbin/sshd "
	         "\"$@\"; fi; "
	         "echo 'cnlab: no sshd in this server: its image has "
	         "no " CNL_AGENT_SSHD
	         " and its node none to lend' >&2; exit 127",
	         loader, loader, libdir);
	n = exec_prefix(a, o->id, root, sizeof(root), argv);
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = script;
	argv[n++] = "sshd";
	argv[n++] = "-i";
	argv[n++] = "-e";
	argv[n++] = "-f";
	argv[n++] = CNL_AGENT_SSH_DIR "/sshd_config";
	argv[n] = NULL;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0 &&
	    pipe2(ep, O_CLOEXEC | O_NONBLOCK) == 0)
		pid = cnl_launcher_spawn_in(a->launcher, o->id, argv, sp[1],
		                            sp[1], ep[1]);
	if (sp[1] >= 0)
		close(sp[1]);
	if (ep[1] >= 0)
		close(ep[1]);
	if (pid < 0) {
		ssh_say(s, "cnlab: node %s cannot start sshd: %s", a->cfg.name,
		        cnl_strerror((int)pid));
		goto out;
	}
	from_sshd = relay(a, s, sp[0]);
	/* The connection is gone: a hangup, as a terminal's, for what the
	 * session started (nohup'd work lives on), and sshd's input ends. */
	hangup_tree(pid);
	shutdown(sp[0], SHUT_RDWR);
	for (int i = 0; i < 50; i++) {
		r = waitpid(pid, &wst, WNOHANG);
		if (r == pid || (r < 0 && errno != EINTR))
			break;
		usleep(100 * 1000);
		r = 0;
	}
	if (r == 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
			;
	}
	for (ssize_t k;
	     got < sizeof(errbuf) - 1 &&
	     (k = read(ep[0], errbuf + got, sizeof(errbuf) - 1 - got)) > 0;)
		got += (size_t)k;
	errbuf[got] = '\0';
	/* Nothing from sshd at all: it did not start; say why. */
	if (from_sshd == 0) {
		char *nl;

		while (got > 0 && errbuf[got - 1] == '\n')
			errbuf[--got] = '\0';
		nl = strrchr(errbuf, '\n');
		ssh_say(s, "cnlab: sshd did not start in the server%s%s",
		        got ? ": " : "", nl ? nl + 1 : errbuf);
	}
	{
		char q[600];

		cnl_log(CNL_LOG_INFO, "ssh session ended",
		        "id=%s bytes_out=%zu sshd=%s", o->id, from_sshd,
		        cnl_log_quote(q, sizeof(q), errbuf));
	}
out:
	if (sp[0] >= 0)
		close(sp[0]);
	if (ep[0] >= 0)
		close(ep[0]);
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
	if (o->ssh_host_key) {
		ssh_one(a, o, s);
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
	o->ssh_host_key = t->ssh_host_key;
	o->ssh_keys = t->ssh_keys;
	t->ssh_host_key = t->ssh_keys = NULL;
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
