/*
 * reporter.c - what the agent says to cnlabd about its work, and the
 * heartbeat that keeps its lease (agent-internal.h has the map):
 *
 *   reports      POST /v1/nodes/{id}/reports      cnl_wire_report
 *   log chunks   POST /v1/nodes/{id}/logs         cnl_wire_log
 *   files        POST /v1/nodes/{id}/artifacts,   cnl_wire_file
 *                     /checkpoints
 *                GET  /v1/nodes/{id}/checkpoints, cnl_wire_files (reply)
 *                     /inputs
 *   heartbeats   POST /v1/nodes/{id}/heartbeat    cnl_wire_heartbeat,
 *                                                 cnl_wire_node (reply)
 *
 * Every (id, epoch) pair the agent sends is a workload's; a 409 from
 * cnlabd means the epoch is stale, and the caller then kills the workload
 * without reporting anything more about it.  A reply that does not decode
 * is logged with the field its decoder names and treated like a call that
 * failed.
 *
 * The heartbeat thread renews the lease file after each good heartbeat;
 * each workload's watchdog (cnlab-agent --watchdog) kills it once that
 * file is older than the lease, and the thread itself kills all work once
 * a lease has passed without one (self-fencing, agent.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "common/base64.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

/* Copy @s into @buf (@size bytes), cut short, if need be, before a UTF-8
 * sequence rather than inside it. */
static void copy_text(char *buf, size_t size, const char *s)
{
	size_t n = strlen(s);

	if (n >= size) {
		n = size - 1;
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
}

long cnl_agent_report(struct cnl_agent *a, struct cnl_client *cl,
                      const struct wk *w, enum cnl_wire_report_state state,
                      int code, const char *url, const char *msg)
{
	struct cnl_wire_report m = {.epoch = w->epoch,
	                            .state = state,
	                            .has_exit_code = true,
	                            .exit_code = code};
	char route[256], err[256], q[300];
	json_t *body;
	long st;

	snprintf(m.id, sizeof(m.id), "%s", w->id);
	copy_text(m.url, sizeof(m.url), url ? url : "");
	copy_text(m.message, sizeof(m.message), msg ? msg : "");
	if (!(body = cnl_wire_report_encode(&m)))
		return -ENOMEM;
	snprintf(route, sizeof(route), "/v1/nodes/%s/reports", a->node_id);
	st = cnl_client_call(cl, "POST", route, body, 30, NULL, err,
	                     sizeof(err));
	if (st != 200)
		cnl_log(CNL_LOG_WARN, "report not accepted",
		        "id=%s state=%s err=%s", w->id,
		        cnl_wire_report_state_name(state),
		        cnl_log_quote(q, sizeof(q), err));
	json_decref(body);
	return st;
}

void cnl_agent_send_log(struct cnl_agent *a, struct cnl_client *cl,
                        const char *id, int64_t epoch, bool is_stderr,
                        char *buf, size_t n)
{
	struct cnl_wire_log m = {.epoch = epoch, .stderr_ = is_stderr};
	char route[256], err[256];
	json_t *body;

	for (size_t i = 0; i < n; i++) /* keep JSON strings valid UTF-8 */
		if ((unsigned char)buf[i] >= 0x80 || buf[i] == '\0')
			buf[i] = (unsigned char)buf[i] >= 0x80 ? '?' : ' ';
	buf[n] = '\0';
	snprintf(m.id, sizeof(m.id), "%s", id);
	m.data = buf;
	if (!(body = cnl_wire_log_encode(&m)))
		return;
	snprintf(route, sizeof(route), "/v1/nodes/%s/logs", a->node_id);
	cnl_client_call(cl, "POST", route, body, 30, NULL, err, sizeof(err));
	json_decref(body);
}

/* ---- files to and from cnlabd -------------------------------------------- */

void cnl_agent_upload_dir(struct cnl_agent *a, struct cnl_client *cl,
                          const struct wk *w, const char *dir, const char *what)
{
	char path[1200], route[256], err[256], q[300], qf[300];
	struct dirent *e;
	DIR *d = opendir(dir);

	if (!d)
		return;
	snprintf(route, sizeof(route), "/v1/nodes/%s/%s", a->node_id, what);
	while ((e = readdir(d))) {
		struct cnl_wire_file m = {.epoch = w->epoch};
		struct stat st;
		uint8_t *buf;
		FILE *f;
		size_t got;
		json_t *body;
		long st2;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (st.st_size > FILE_MAX) {
			cnl_log(CNL_LOG_WARN, "file too large to upload",
			        "id=%s file=%s size=%lld", w->id,
			        cnl_log_quote(qf, sizeof(qf), e->d_name),
			        (long long)st.st_size);
			continue;
		}
		if (strlen(e->d_name) >= sizeof(m.name)) {
			cnl_log(CNL_LOG_WARN, "file name too long to upload",
			        "id=%s file=%s", w->id,
			        cnl_log_quote(qf, sizeof(qf), e->d_name));
			continue;
		}
		if (!(f = fopen(path, "rb")))
			continue;
		buf = cnl_xmalloc((size_t)st.st_size + 1);
		got = fread(buf, 1, (size_t)st.st_size, f);
		fclose(f);
		snprintf(m.id, sizeof(m.id), "%s", w->id);
		memcpy(m.name, e->d_name, strlen(e->d_name) + 1); /* fits */
		m.data_base64 = cnl_b64_encode_new(buf, got, CNL_B64_PAD);
		free(buf);
		/* NULL for a name that is not UTF-8: cnlabd would refuse it. */
		if (!(body = cnl_wire_file_encode(&m))) {
			cnl_log(CNL_LOG_WARN, "upload refused",
			        "id=%s file=%s err=\"not a plain file name\"",
			        w->id,
			        cnl_log_quote(qf, sizeof(qf), e->d_name));
			free(m.data_base64);
			continue;
		}
		st2 = cnl_client_call(cl, "POST", route, body, 30, NULL, err,
		                      sizeof(err));
		if (st2 != 201)
			cnl_log(CNL_LOG_WARN, "upload refused",
			        "id=%s file=%s err=%s", w->id,
			        cnl_log_quote(qf, sizeof(qf), e->d_name),
			        cnl_log_quote(q, sizeof(q), err));
		json_decref(body);
		cnl_wire_file_done(&m);
	}
	closedir(d);
}

void cnl_agent_fetch_files(struct cnl_agent *a, struct cnl_client *cl,
                           const struct wk *w, const char *what,
                           const char *dest)
{
	char route[256], err[256], path[1200], q[300];
	struct cnl_wire_files files = {0};
	json_t *reply = NULL;
	int r;

	snprintf(route, sizeof(route), "/v1/nodes/%s/%s?job=%s&epoch=%" PRId64,
	         a->node_id, what, w->id, w->epoch);
	if (cnl_client_call(cl, "GET", route, NULL, 30, &reply, err,
	                    sizeof(err)) != 200) {
		json_decref(reply);
		return;
	}
	r = cnl_wire_files_decode(reply, &files, err, sizeof(err));
	json_decref(reply);
	if (r < 0) {
		cnl_log(CNL_LOG_WARN, "reply does not decode",
		        "id=%s what=%s err=%s", w->id, what,
		        cnl_log_quote(q, sizeof(q), err));
		cnl_wire_files_done(&files);
		return;
	}
	/* The decoder let only plain file names through: no '/', no "..". */
	for (size_t i = 0; i < files.n; i++) {
		const struct cnl_wire_file *it = &files.items[i];
		size_t len;
		uint8_t *buf;
		FILE *f;

		if (it->name[0] == '.')
			continue;
		if (cnl_b64_decode_new(it->data_base64, CNL_B64_PAD, FILE_MAX,
		                       &buf, &len) == 0) {
			snprintf(path, sizeof(path), "%s/%s", dest, it->name);
			if ((f = fopen(path, "wb"))) {
				fwrite(buf, 1, len, f);
				fclose(f);
			}
			free(buf);
		}
	}
	if (files.n)
		cnl_log(CNL_LOG_INFO, "files restored",
		        "id=%s what=%s files=%zu", w->id, what, files.n);
	cnl_wire_files_done(&files);
}

/* ---- heartbeats and the lease -------------------------------------------- */

void cnl_agent_lease_touch(const struct cnl_agent *a)
{
	int fd = open(a->lease, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	if (fd >= 0) {
		futimens(fd, NULL);
		close(fd);
	}
}

/*
 * Kill all work, keeping it in the table: its end (failed, with the
 * reason) is reported once cnlabd answers again.  Forgetting it instead
 * would let the next assignment poll start the same (id, epoch) again,
 * since cnlabd, restarted meanwhile, may still hold it as running here.
 */
static void kill_all(struct cnl_agent *a, const char *why)
{
	size_t n = 0;

	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->n_wk; i++) {
		struct wk *w = a->wk[i];

		if (w->gone || w->ended || w->fenced)
			continue;
		w->fenced = true;
		cnl_workload_kill(w->w);
		n++;
	}
	pthread_mutex_unlock(&a->mu);
	if (n)
		cnl_log(CNL_LOG_WARN, "stopped all work", "why=\"%s\" n=%zu",
		        why, n);
}

/* The heartbeat's body: the work this node runs (not what was moved). */
static json_t *heartbeat_body(struct cnl_agent *a)
{
	struct cnl_wire_heartbeat m = {.has_running = true};
	json_t *body;

	pthread_mutex_lock(&a->mu);
	m.running = cnl_xcalloc(a->n_wk + 1, sizeof(*m.running));
	for (size_t i = 0; i < a->n_wk; i++) {
		struct cnl_wire_running *r = &m.running[m.n_running];

		if (a->wk[i]->gone)
			continue;
		snprintf(r->id, sizeof(r->id), "%s", a->wk[i]->id);
		r->epoch = a->wk[i]->epoch;
		m.n_running++;
	}
	pthread_mutex_unlock(&a->mu);
	body = cnl_wire_heartbeat_encode(&m);
	cnl_wire_heartbeat_done(&m);
	return body;
}

/* Stop the work cnlabd says is not this node's to run (moved, ended). */
static void stop_moved(struct cnl_agent *a, const struct cnl_wire_node *node)
{
	pthread_mutex_lock(&a->mu);
	for (size_t k = 0; k < node->n_stop; k++) {
		struct wk *w = cnl_agent_wk_find(a, node->stop[k]);

		if (w && !w->gone) {
			w->gone = true;
			a->fenced_total++;
			cnl_workload_kill(w->w);
			cnl_log(CNL_LOG_WARN, "work was moved; stopped",
			        "id=%s", w->id);
		}
	}
	pthread_mutex_unlock(&a->mu);
}

void *cnl_agent_heartbeat(void *arg)
{
	struct cnl_agent *a = arg;
	char route[256], err[256], q[300], qr[300];

	snprintf(route, sizeof(route), "/v1/nodes/%s/heartbeat", a->node_id);
	while (!a->stop) {
		struct cnl_wire_node node = {0};
		json_t *reply = NULL, *body = heartbeat_body(a);
		long st;

		st = cnl_client_call(a->hb_cl, "POST", route, body, 10, &reply,
		                     err, sizeof(err));
		json_decref(body);
		if (st == 200 &&
		    cnl_wire_node_decode(reply, &node, err, sizeof(err)) < 0) {
			cnl_log(CNL_LOG_WARN, "reply does not decode",
			        "route=%s err=%s",
			        cnl_log_quote(qr, sizeof(qr), route),
			        cnl_log_quote(q, sizeof(q), err));
			st = -EPROTO; /* as if the call had failed */
		}
		if (st == 200) {
			a->last_hb_ok_ms = cnl_time_now_ms();
			cnl_agent_lease_touch(a);
			a->node_epoch = node.epoch;
			stop_moved(a, &node);
		} else if (cnl_time_now_ms() - a->last_hb_ok_ms > a->lease_ms) {
			/* Self-fencing: the control plane may move our work
			 * after twice this; it must be gone by then. */
			kill_all(a, "lease expired: cnlabd unreachable");
		}
		cnl_wire_node_done(&node);
		json_decref(reply);
		for (int64_t t = 0; t < a->heartbeat_ms && !a->stop; t += 50)
			usleep(50 * 1000);
	}
	return NULL;
}
