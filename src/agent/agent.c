/*
 * agent.c - cnlab-agent's daemon, its life cycle (agent.h has the threads
 * and the layout of the work directory; agent-internal.h the map of the
 * files): new, registration, run (the assignment poll, on the main
 * thread), stop, free, and the adoption of running work after a restart.
 *
 * run() registers the node (retrying while cnlabd is unreachable),
 * re-adopts the workloads it finds by cgroup and state file, starts the
 * heartbeat thread (reporter.c) and the supervise thread (supervisor.c),
 * and long-polls the node's assignments, each list decoded with the node
 * protocol's decoder and handed to the supervisor's reconcile.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

/*
 * One agent per work directory (per node): a POSIX record lock on
 * work_dir/agent.lock, held as long as this process runs and released by
 * the kernel when it ends however it ends.  A record lock, not flock: a
 * fork does not inherit it, so the workloads' supervisors (forks of the
 * agent that outlive it) never hold it.  The file says our pid; F_GETLK
 * says it too, which is how cnlabd --all-in-one finds an orphan.
 */
static int take_lock(struct cnl_agent *a, char *err, size_t errlen)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	char path[600], pid[32];
	int fd, n;

	snprintf(path, sizeof(path), "%s/agent.lock", a->cfg.work_dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	if (fcntl(fd, F_SETLK, &fl) < 0) {
		int e = errno;

		fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET};
		if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
			snprintf(err, errlen,
			         "another cnlab-agent (pid %d) runs on %s; one "
			         "agent per node",
			         (int)fl.l_pid, a->cfg.work_dir);
		else
			snprintf(err, errlen, "cannot lock %s: %s", path,
			         strerror(e));
		close(fd);
		return -EBUSY;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		cnl_log(CNL_LOG_WARN, "cannot write the lock file", "path=%s",
		        path);
	a->lock_fd = fd;
	return 0;
}

/*
 * The GPU memory audit's NVML (gpu_audit.h): its own handle, so that its
 * thread shares no provider state with the others.  gpu_audit "auto" (or
 * unset) follows the gpus provider: NVML's when it is nvml, none with a
 * fake pool; an NVML that cannot be opened is a configuration error.
 */
static int open_audit(struct cnl_agent *a, char *err, size_t errlen)
{
	const char *spec = a->cfg.gpu_audit;
	char why[400];
	int r;

	if (a->cfg.gpu_audit_ms <= 0)
		return 0;
	if (!spec || !spec[0] || strcmp(spec, "auto") == 0)
		spec =
		    strncmp(a->cfg.gpus, "nvml", 4) == 0 ? a->cfg.gpus : "none";
	if (strcmp(spec, "none") == 0)
		return 0;
	if (strcmp(spec, "nvml") != 0 && strncmp(spec, "nvml:", 5) != 0) {
		snprintf(err, errlen,
		         "gpu_audit: \"%.64s\" is not auto, none, nvml or "
		         "nvml:/path/libnvidia-ml.so.1",
		         spec);
		return -CNL_ECONFIG;
	}
	if ((r = cnl_gpus_open(spec, &a->cat, &a->audit_gpus, why,
	                       sizeof(why))) < 0) {
		snprintf(err, errlen, "gpu_audit: %s", why);
		return r;
	}
	return 0;
}

int cnl_agent_new(const struct cnl_agent_config *cfg, struct cnl_agent **ret,
                  char *err, size_t errlen)
{
	struct cnl_agent *a = cnl_xcalloc(1, sizeof(*a));
	/* Each request says how long it may take; a reply past 16 MiB is
	 * not one cnlabd sends. */
	struct cnl_client_config ccfg = {
	    .base = cfg->server,
	    .token_fn = cnl_agent_token_fn,
	    .cafile = cfg->cafile,
	    .connect_timeout_ms = 5 * 1000,
	    .reply_max = (size_t)16 << 20,
	};
	char path[600];
	int r;

	a->cfg = *cfg;
	ccfg.token_ud = a;
	a->lock_fd = -1;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->start_cv, NULL);
	a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	a->out_ifd =
	    a->wake_fd < 0 ? -1 : inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (a->wake_fd < 0 || a->out_ifd < 0) {
		r = -errno;
		snprintf(err, errlen, "eventfd/inotify: %s", strerror(errno));
		goto fail;
	}
	cnl_catalog_init(&a->cat);
	if ((r = cnl_gpus_open(cfg->gpus, &a->cat, &a->gpus, err, errlen)) <
	        0 ||
	    (r = open_audit(a, err, errlen)) < 0)
		goto fail;
	static const char *const sub[] = {"jobs", "workspaces", "regions",
	                                  "state", "exits"};
	for (size_t i = 0; i < CNL_ARRAY_SIZE(sub); i++) {
		snprintf(path, sizeof(path), "%s/%s", cfg->work_dir, sub[i]);
		if ((r = cnl_agent_mkdirs(path)) < 0) {
			snprintf(err, errlen, "%s: %s", path, strerror(-r));
			goto fail;
		}
	}
	if ((r = take_lock(a, err, errlen)) < 0 ||
	    (r = cnl_agent_cred_init(a, err, errlen)) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/exits", cfg->work_dir);
	if ((r = cnl_launcher_new(cfg->name, path, &a->launcher, err, errlen)) <
	    0)
		goto fail;
	if ((r = cnl_client_new(&ccfg, &a->main_cl)) < 0 ||
	    (r = cnl_client_new(&ccfg, &a->hb_cl)) < 0 ||
	    (r = cnl_client_new(&ccfg, &a->sup_cl)) < 0 ||
	    (r = cnl_client_new(&ccfg, &a->tun_cl)) < 0 ||
	    (r = cnl_client_new(&ccfg, &a->aud_cl)) < 0) {
		snprintf(err, errlen, "bad server URL or token");
		goto fail;
	}
	/* Starts run side by side, two per core (agent-internal.h). */
	{
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		a->n_starters = cpus < 1 ? 2 : (int)(2 * cpus);
		if (a->n_starters > CNL_AGENT_STARTERS_MAX)
			a->n_starters = CNL_AGENT_STARTERS_MAX;
	}
	for (int i = 0; i < a->n_starters; i++)
		if ((r = cnl_client_new(&ccfg, &a->start_cl[i])) < 0) {
			snprintf(err, errlen, "bad server URL or token");
			goto fail;
		}
	if ((r = cnl_agent_container_init(a, err, errlen)) < 0)
		goto fail;
	snprintf(a->lease, sizeof(a->lease), "%s/lease", cfg->work_dir);
	*ret = a;
	return 0;
fail:
	cnl_agent_free(a);
	return r;
}

static int register_node(struct cnl_agent *a, char *err, size_t errlen)
{
	const struct cnl_gpu_dev *devs;
	int n = cnl_gpus_list(a->gpus, &devs);
	struct cnl_wire_register m = {.protocol = CNL_WIRE_PROTOCOL};
	struct cnl_wire_node node;
	json_t *body, *reply = NULL;
	long st;
	int r;

	if (n > CNL_WIRE_GPUS_MAX)
		n = CNL_WIRE_GPUS_MAX;
	snprintf(m.name, sizeof(m.name), "%s", a->cfg.name);
	snprintf(m.gpu_type, sizeof(m.gpu_type), "%s", n ? devs[0].type : "");
	m.gpus = n;
	m.cpu_milli = a->cfg.cpu_milli;
	m.mem_mib = a->cfg.mem_mib;
	snprintf(m.address, sizeof(m.address), "%s", a->cfg.address);
	m.has_devices = true;
	for (int i = 0; i < n; i++) {
		struct cnl_wire_device *d = &m.devices[m.n_devices++];

		d->index = devs[i].index;
		snprintf(d->uuid, sizeof(d->uuid), "%s", devs[i].uuid);
		d->mem_mib = (int64_t)devs[i].mem_mib;
		d->healthy = devs[i].healthy;
	}
	snprintf(m.cluster, sizeof(m.cluster), "%s",
	         a->cfg.cluster ? a->cfg.cluster : "");
	snprintf(m.zone, sizeof(m.zone), "%s", a->cfg.zone ? a->cfg.zone : "");
	snprintf(m.rack, sizeof(m.rack), "%s", a->cfg.rack ? a->cfg.rack : "");
	/* Sent on every registration: a restart with another list relabels
	 * the node. */
	for (const char *p = a->cfg.datasets; p && *p;) {
		size_t len = strcspn(p, ",");

		if (m.n_datasets < CNL_WIRE_DATASETS_MAX)
			snprintf(m.datasets[m.n_datasets++],
			         sizeof(m.datasets[0]), "%.*s", (int)len, p);
		m.has_datasets = true;
		p += len + (p[len] == ',');
	}
	body = cnl_wire_register_encode(&m);
	st = cnl_client_call(a->main_cl, "POST", "/v1/nodes", body, 30, &reply,
	                     err, errlen);
	/* The stored credential refused (revoked): a new join token? */
	if (st == 401 && cnl_agent_cred_rejoin(a)) {
		json_decref(reply);
		reply = NULL;
		st = cnl_client_call(a->main_cl, "POST", "/v1/nodes", body, 30,
		                     &reply, err, errlen);
	}
	json_decref(body);
	if (st != 200 && st != 201) {
		json_decref(reply);
		return st < 0 ? (int)st : -CNL_ECONFIG;
	}
	r = cnl_wire_node_decode(reply, &node, err, errlen);
	json_decref(reply);
	if (r < 0) {
		/* run() logs @err, which names the field. */
		cnl_wire_node_done(&node);
		return -EPROTO;
	}
	/* A join: the node's own credential, kept for every start after. */
	if (node.credential[0]) {
		cnl_agent_cred_take(a, node.credential);
		explicit_bzero(node.credential, sizeof(node.credential));
	}
	snprintf(a->node_id, sizeof(a->node_id), "%s", node.id);
	a->node_epoch = node.epoch;
	a->next_rotate_ms = cnl_time_now_ms() + a->cfg.rotate_s * 1000;
	a->lease_ms = node.lease_ms;
	/* The lease stops the work of an agent that died before cnlabd
	 * moves it; the grace keeps work running through an outage of
	 * cnlabd itself, the agent alive (agent.h). */
	a->grace_ms = node.lease_ms > a->cfg.outage_grace_ms
	                  ? node.lease_ms
	                  : a->cfg.outage_grace_ms;
	a->heartbeat_ms = node.heartbeat_ms > 0 ? node.heartbeat_ms : 1000;
	cnl_wire_node_done(&node);
	return 0;
}

/* ---- adoption after a restart ------------------------------------------ */

/* Take back every workload that still has its cgroup here and a state
 * file: it ran under the agent before this one, and goes on. */
static void adopt(struct cnl_agent *a)
{
	char ids[256][64];
	int n = cnl_launcher_list(a->launcher, ids, 256);

	/* The list says how many there are, which may be more than it
	 * wrote: the rest are left where they are, named in the log. */
	if (n > (int)CNL_ARRAY_SIZE(ids)) {
		cnl_log(CNL_LOG_WARN,
		        "more workload cgroups than can be adopted at once",
		        "found=%d adopted_at_most=%zu", n, CNL_ARRAY_SIZE(ids));
		n = (int)CNL_ARRAY_SIZE(ids);
	}
	for (int i = 0; i < n; i++) {
		char err[256];
		struct wk *w;
		int r;

		ids[i][sizeof(ids[i]) - 1] = '\0';
		if ((r = cnl_agent_state_load(a, ids[i], &w, err,
		                              sizeof(err))) < 0) {
			char q[300];

			if (r != -ENOENT)
				cnl_log(CNL_LOG_WARN, "state file unreadable",
				        "id=%s err=%s", ids[i],
				        cnl_log_quote(q, sizeof(q), err));
			continue;
		}
		w->last_active_ms = cnl_time_now_ms();
		if (cnl_launcher_adopt(a->launcher, ids[i], &w->w) < 0) {
			cnl_agent_wk_free(w);
			continue;
		}
		/* A server's port on the node's loopback is the
		 * forwarder's: listen on it again. */
		if (w->server && !a->cfg.bare && w->port > 0 &&
		    (r = cnl_fwd_start(a->launcher, w->id, "127.0.0.1", w->port,
		                       &w->fwd, &w->port)) < 0)
			cnl_log(CNL_LOG_WARN, "cannot listen for a server",
			        "id=%s port=%d err=\"%s\"", w->id, w->port,
			        cnl_strerror(r));
		cnl_agent_wk_add(a, w);
		cnl_log(CNL_LOG_INFO, "re-adopted workload",
		        "id=%s epoch=%" PRId64, w->id, w->epoch);
	}
}

/* One long poll of the assignments and what it brings; false when the
 * call failed (or its reply did not decode). */
static bool poll_assignments(struct cnl_agent *a)
{
	char route[256], err[512];
	struct cnl_wire_assignments as = {0};
	json_t *reply = NULL;
	long st;
	int r;

	snprintf(route, sizeof(route),
	         "/v1/nodes/%s/assignments?since=%llu&wait=2", a->node_id,
	         (unsigned long long)a->version);
	st = cnl_client_call(a->main_cl, "GET", route, NULL, 30, &reply, err,
	                     sizeof(err));
	if (st != 200) {
		json_decref(reply);
		return false;
	}
	r = cnl_wire_assignments_decode(reply, &as, err, sizeof(err));
	json_decref(reply);
	if (r < 0) {
		char q[300], qr[300];

		cnl_log(CNL_LOG_WARN, "reply does not decode",
		        "route=%s err=%s", cnl_log_quote(qr, sizeof(qr), route),
		        cnl_log_quote(q, sizeof(q), err));
		cnl_wire_assignments_done(&as);
		return false;
	}
	a->version = as.version;
	cnl_agent_reconcile(a, &as);
	cnl_wire_assignments_done(&as);
	return true;
}

int cnl_agent_run(struct cnl_agent *a)
{
	char err[512], q[600];
	int64_t backoff_ms = 50;
	int r;

	/* cnlabd may start after us: retry registration until it answers. */
	while ((r = register_node(a, err, sizeof(err))) == -EIO && !a->stop) {
		cnl_log(CNL_LOG_WARN, "cnlabd unreachable; retrying", "err=%s",
		        cnl_log_quote(q, sizeof(q), err));
		sleep(1);
	}
	if (r < 0) {
		cnl_log(CNL_LOG_ERROR, "registration refused", "err=%s",
		        cnl_log_quote(q, sizeof(q), err));
		return r;
	}
	cnl_log(CNL_LOG_INFO, "registered",
	        "node=%s id=%s epoch=%" PRId64 " lease_ms=%" PRId64
	        " grace_ms=%" PRId64,
	        a->cfg.name, a->node_id, a->node_epoch, a->lease_ms,
	        a->grace_ms);
	cnl_agent_lease_touch(a);
	adopt(a);
	cnl_agent_workspaces_sweep(a);
	a->last_hb_ok_ms = cnl_time_now_ms();
	cnl_agent_metrics_listen(a);
	pthread_create(&a->hb_thread, NULL, cnl_agent_heartbeat, a);
	pthread_create(&a->sup_thread, NULL, cnl_agent_supervise, a);
	/* Named, so that its wake-ups can be told apart (agent.sh counts
	 * them: it sleeps while nothing happens). */
	(void)pthread_setname_np(a->sup_thread, "cnl-supervise");
	pthread_create(&a->tun_thread, NULL, cnl_agent_tunnels, a);
	if (a->audit_gpus)
		pthread_create(&a->aud_thread, NULL, cnl_agent_gpu_audit, a);
	for (int i = 0; i < a->n_starters; i++)
		pthread_create(&a->start_thread[i], NULL, cnl_agent_starter, a);
	/* The long poll returns as soon as cnlabd places work here; after a
	 * failure (cnlabd away) the next try waits 50 ms, doubled up to a
	 * second while it keeps failing. */
	while (!a->stop) {
		if (poll_assignments(a)) {
			backoff_ms = 50;
			continue;
		}
		usleep((useconds_t)backoff_ms * 1000);
		backoff_ms = backoff_ms < 500 ? backoff_ms * 2 : 1000;
	}
	cnl_agent_starters_wake(a);
	for (int i = 0; i < a->n_starters; i++)
		pthread_join(a->start_thread[i], NULL);
	pthread_join(a->hb_thread, NULL);
	pthread_join(a->sup_thread, NULL);
	pthread_join(a->tun_thread, NULL);
	if (a->audit_gpus)
		pthread_join(a->aud_thread, NULL);
	return 0;
}

void cnl_agent_stop(struct cnl_agent *a)
{
	a->stop = true;
	cnl_agent_wake(a);
}

void cnl_agent_free(struct cnl_agent *a)
{
	if (!a)
		return;
	cnl_http_server_free(a->metrics);
	cnl_agent_secrets_close(a);
	for (size_t i = 0; i < a->n_wk; i++) {
		/* Workloads keep running: a restarted agent re-adopts them.
		 * Those that ended keep their cgroup and exit record too:
		 * their end is not reported yet, and the next agent can
		 * only report it if it finds them. */
		cnl_workload_release(a->wk[i]->w);
		cnl_agent_wk_free(a->wk[i]);
	}
	free(a->wk);
	free(a->drop);
	for (size_t i = 0; i < a->n_start_q; i++)
		free(a->start_q[i]);
	free(a->start_q);
	for (int i = 0; i < a->n_starters; i++)
		cnl_client_free(a->start_cl[i]);
	cnl_client_free(a->main_cl);
	cnl_client_free(a->hb_cl);
	cnl_client_free(a->sup_cl);
	cnl_client_free(a->tun_cl);
	cnl_client_free(a->aud_cl);
	cnl_launcher_free(a->launcher);
	cnl_gpus_close(a->gpus);
	cnl_gpus_close(a->audit_gpus);
	if (a->runtime_fd > 0)
		close(a->runtime_fd);
	if (a->lock_fd >= 0)
		close(a->lock_fd); /* releases the lock */
	if (a->wake_fd >= 0)
		close(a->wake_fd);
	if (a->out_ifd >= 0)
		close(a->out_ifd);
	pthread_cond_destroy(&a->start_cv);
	pthread_mutex_destroy(&a->mu);
	explicit_bzero(a->cred, sizeof(a->cred));
	explicit_bzero(a->join, sizeof(a->join));
	free(a);
}
