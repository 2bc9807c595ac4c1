/*
 * reporter.c - what the agent says to cnlabd about its work, and the
 * heartbeat that keeps its lease (agent-internal.h has the map):
 *
 *   reports      POST /v1/nodes/{id}/reports      cnl_wire_report
 *   log chunks   POST /v1/nodes/{id}/logs         cnl_wire_log
 *   files        PUT  /v1/nodes/{id}/artifacts,   raw bytes, streamed;
 *                     /checkpoints                cnl_wire_file (reply)
 *                GET  /v1/nodes/{id}/checkpoints, cnl_wire_files (reply)
 *                     /inputs
 *                GET  .../checkpoints/file,       raw bytes, streamed
 *                     .../inputs/file
 *   heartbeats   POST /v1/nodes/{id}/heartbeat    cnl_wire_heartbeat,
 *                                                 cnl_wire_node (reply)
 *
 * Every (id, epoch) pair the agent sends is a workload's; a 409 from
 * cnlabd means the epoch is stale, and the caller then kills the workload
 * without reporting anything more about it.  A reply that does not decode
 * is logged with the field its decoder names and treated like a call that
 * failed.
 *
 * The heartbeat thread renews the lease file after each good heartbeat,
 * and after each failed one within the outage grace; each workload's
 * watchdog kills it once that file is older than the lease (its agent
 * died), and the thread itself kills all work once the grace has passed
 * without a good heartbeat (self-fencing, agent.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/error.h"

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

long cnl_agent_send_log(struct cnl_agent *a, struct cnl_client *cl,
                        const char *id, int64_t epoch, bool is_stderr,
                        int64_t offset, int64_t dropped, char *buf, size_t n,
                        int64_t *ret_next)
{
	struct cnl_wire_log m = {.epoch = epoch,
	                         .stderr_ = is_stderr,
	                         .has_offset = true,
	                         .offset = offset,
	                         .dropped = dropped};
	struct cnl_wire_log_ack ack;
	char route[256], err[256], q[300];
	json_t *body, *reply = NULL;
	long st;

	*ret_next = offset + (int64_t)n;
	/* Byte for byte: the encoder sends text as text and anything else
	 * (a character cut at the chunk's end included) as base64. */
	buf[n] = '\0';
	snprintf(m.id, sizeof(m.id), "%s", id);
	m.data = buf;
	m.len = n;
	if (!(body = cnl_wire_log_encode(&m)))
		return -ENOMEM;
	snprintf(route, sizeof(route), "/v1/nodes/%s/logs", a->node_id);
	st = cnl_client_call(cl, "POST", route, body, 30, &reply, err,
	                     sizeof(err));
	json_decref(body);
	if ((st == 200 || st == 201 || st == 416) && reply) {
		/* A 416 carries "next" beside its error. */
		json_t *o =
		    st == 416 ? json_deep_copy(reply) : json_incref(reply);

		json_object_del(o, "error");
		if (cnl_wire_log_ack_decode(o, &ack, err, sizeof(err)) < 0) {
			cnl_log(CNL_LOG_WARN, "reply does not decode",
			        "route=/logs err=%s",
			        cnl_log_quote(q, sizeof(q), err));
			st = -EPROTO;
		} else if (ack.has_next) {
			*ret_next = ack.next;
		} else if (st == 416) {
			st = -EPROTO;
		}
		json_decref(o);
	}
	json_decref(reply);
	return st;
}

/* ---- files to and from cnlabd -------------------------------------------- */

/* How deep a job's folders may go. */
#define TREE_DEPTH_MAX 32

/* One upload_dir(): where files go, and the first failure. */
struct collect {
	struct cnl_client *cl;
	const char *route; /* where each goes, but its "&path=" */
	const char *id;    /* the job's, for the log */
	const char *what;  /* "artifacts", "checkpoints" */
	const char *word;  /* "artifact", "checkpoint file" */
	char *why;
	size_t whylen;
	int failed, sent;
	bool have_openat2;
};

/* Open @name beneath the folder @dfd, following no link at all: openat2
 * where the kernel has it, else openat with O_NOFOLLOW (a single
 * component, so the same). */
static int open_beneath(struct collect *k, int dfd, const char *name, int flags)
{
	if (k->have_openat2) {
		struct open_how how = {
		    .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
		    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
		               RESOLVE_NO_MAGICLINKS,
		};
		long fd = syscall(SYS_openat2, dfd, name, &how, sizeof(how));

		if (fd >= 0 || errno != ENOSYS)
			return (int)fd;
		k->have_openat2 = false;
	}
	return openat(dfd, name, flags | O_NOFOLLOW | O_CLOEXEC);
}

/* Note that @rel could not be collected, for @reason; the first one goes
 * into the job's end. */
__attribute__((format(printf, 3, 4))) static void
refuse(struct collect *k, const char *rel, const char *fmt, ...)
{
	char reason[512], q[600], qf[300], msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	cnl_log(CNL_LOG_WARN, "file not collected",
	        "id=%s what=%s file=%s err=%s", k->id, k->what,
	        cnl_log_quote(qf, sizeof(qf), rel),
	        cnl_log_quote(q, sizeof(q), reason));
	if (k->failed++ == 0) {
		/* cnlabd's refusals name the file themselves. */
		if (reason[0] == '=')
			snprintf(msg, sizeof(msg), "%s", reason + 1);
		else
			snprintf(msg, sizeof(msg), "%s \"%s\": %s", k->word,
			         rel, reason);
		copy_text(k->why, k->whylen, msg);
	}
}

/* PUT the @size bytes of @fd as @rel; 0, or -1 after refuse(). */
static int put_file(struct collect *k, int fd, uint64_t size, const char *rel)
{
	char sha[65], err[256], q[300];
	_cleanup_free_ char *ep = cnl_client_url_escape(rel);
	_cleanup_free_ char *path = NULL;
	struct cnl_client_reply r = {0};
	struct cnl_wire_file f;
	size_t n;
	int rc;

	if ((rc = cnl_client_file_sha256(fd, size, sha)) < 0) {
		refuse(k, rel, "cannot read it: %s",
		       rc == -ENODATA ? "it shrank while read" : strerror(-rc));
		return -1;
	}
	n = strlen(k->route) + strlen(ep) + 8;
	path = cnl_xmalloc(n);
	snprintf(path, n, "%s&path=%s", k->route, ep);
	/* A few tries for a control plane that blinked; none for a file
	 * it refused. */
	for (int attempt = 0; attempt < 3; attempt++) {
		cnl_client_reply_done(&r);
		if (attempt)
			sleep(1);
		rc = cnl_client_request(
		    k->cl,
		    &(struct cnl_client_request){.method = "PUT",
		                                 .path = path,
		                                 .upload = true,
		                                 .upload_fd = fd,
		                                 .upload_size = size,
		                                 .sha256 = sha,
		                                 .timeout_ms = 0},
		    &r);
		if (rc == 0 && r.status < 500)
			break;
	}
	if (rc < 0) {
		refuse(k, rel, "not delivered: %s", r.error);
		cnl_client_reply_done(&r);
		return -1;
	}
	if (r.status != 201) {
		const char *msg = NULL;

		cnl_http_error_read(r.json, NULL, &msg);
		if (msg && msg[0])
			refuse(k, rel, "=%s", msg); /* it names the file */
		else
			refuse(k, rel, "refused by cnlabd (%ld)", r.status);
		cnl_client_reply_done(&r);
		return -1;
	}
	if (cnl_wire_file_decode(r.json, &f, err, sizeof(err)) < 0) {
		cnl_log(CNL_LOG_WARN, "reply does not decode", "what=%s err=%s",
		        k->what, cnl_log_quote(q, sizeof(q), err));
		refuse(k, rel, "cnlabd's reply does not decode");
		cnl_client_reply_done(&r);
		return -1;
	}
	cnl_client_reply_done(&r);
	if ((uint64_t)f.size != size || strcmp(f.sha256, sha) != 0) {
		refuse(k, rel, "cnlabd stored other bytes than were sent");
		return -1;
	}
	k->sent++;
	return 0;
}

static const char *kind_of(mode_t m)
{
	return S_ISFIFO(m)   ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	                     : "not a regular file";
}

/* Upload what the folder @dfd (owned: closed here) holds, @rel its path
 * from the top ("" for the top). */
static void walk(struct collect *k, int dfd, const char *rel, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	char why[128];

	if (!d) {
		close(dfd);
		refuse(k, rel[0] ? rel : ".", "cannot read the folder");
		return;
	}
	while ((e = readdir(d))) {
		char sub[CNL_WIRE_PATH_MAX + 256];
		struct stat st, st2;
		int fd;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "",
		         e->d_name);
		if (cnl_wire_path_check(sub, why, sizeof(why)) < 0) {
			refuse(k, sub, "its name cannot travel: %s", why);
			continue;
		}
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) <
		    0) {
			refuse(k, sub, "cannot stat it: %s", strerror(errno));
			continue;
		}
		if (S_ISLNK(st.st_mode)) {
			refuse(k, sub,
			       "a symbolic link; links are never followed, "
			       "not collected");
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			if (depth >= TREE_DEPTH_MAX) {
				refuse(k, sub, "folders nested deeper than %d",
				       TREE_DEPTH_MAX);
				continue;
			}
			fd = open_beneath(k, dirfd(d), e->d_name,
			                  O_RDONLY | O_DIRECTORY);
			if (fd < 0) {
				refuse(k, sub, "cannot open the folder: %s",
				       strerror(errno));
				continue;
			}
			walk(k, fd, sub, depth + 1);
			continue;
		}
		if (!S_ISREG(st.st_mode)) {
			refuse(k, sub, "%s, not collected",
			       kind_of(st.st_mode));
			continue;
		}
		/* O_NONBLOCK: a FIFO swapped in meanwhile does not hang us;
		 * what was opened is checked to be what was looked at. */
		fd =
		    open_beneath(k, dirfd(d), e->d_name, O_RDONLY | O_NONBLOCK);
		if (fd < 0) {
			refuse(k, sub, "cannot open it: %s",
			       errno == ELOOP || errno == EXDEV
			           ? "it became a link"
			           : strerror(errno));
			continue;
		}
		if (fstat(fd, &st2) < 0 || !S_ISREG(st2.st_mode) ||
		    st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
			refuse(k, sub, "it changed while it was collected");
		} else if (st2.st_nlink > 1) {
			/* A hard link may name a file of the host's that the
			 * job could not read itself. */
			refuse(k, sub,
			       "a hard link (%ju names); not collected: "
			       "copy it instead",
			       (uintmax_t)st2.st_nlink);
		} else {
			put_file(k, fd, (uint64_t)st2.st_size, sub);
		}
		close(fd);
	}
	closedir(d);
}

int cnl_agent_upload_dir(struct cnl_agent *a, struct cnl_client *cl,
                         const struct wk *w, const char *dir, const char *what,
                         char *why, size_t whylen)
{
	char route[512];

	snprintf(route, sizeof(route), "/v1/nodes/%s/%s?job=%s&epoch=%" PRId64,
	         a->node_id, what, w->id, w->epoch);
	return cnl_agent_upload_tree(cl, dir, route, what, w->id, why, whylen);
}

int cnl_agent_upload_tree(struct cnl_client *cl, const char *dir,
                          const char *route, const char *what, const char *id,
                          char *why, size_t whylen)
{
	struct collect k = {.cl = cl,
	                    .route = route,
	                    .id = id,
	                    .what = what,
	                    .word = strcmp(what, "artifacts") == 0
	                                ? "artifact"
	                                : "checkpoint file",
	                    .why = why,
	                    .whylen = whylen,
	                    .have_openat2 = true};
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (whylen)
		why[0] = '\0';
	if (fd < 0) {
		if (errno == ENOENT)
			return 0; /* no such folder: nothing to send */
		refuse(&k, ".", "the folder cannot be opened (%s)",
		       errno == ELOOP || errno == ENOTDIR
		           ? "it is a symbolic link or not a folder"
		           : strerror(errno));
		return -CNL_EFIELD;
	}
	walk(&k, fd, "", 0);
	if (k.sent)
		cnl_log(CNL_LOG_INFO, "files uploaded",
		        "id=%s what=%s files=%d", id, what, k.sent);
	if (k.failed > 1 && whylen) {
		char more[64];
		size_t l = strlen(why);

		snprintf(more, sizeof(more), " (and %d more)", k.failed - 1);
		if (l + strlen(more) < whylen)
			memcpy(why + l, more, strlen(more) + 1);
	}
	return k.failed ? -CNL_EFIELD : 0;
}

int cnl_agent_fetch_files(struct cnl_agent *a, struct cnl_client *cl,
                          const struct wk *w, const char *what,
                          const char *dest, char *why, size_t whylen)
{
	char route[256], err[256], q[300], qf[300];
	struct cnl_wire_files files = {0};
	json_t *reply = NULL;
	int top, r = 0;
	long st;

	snprintf(route, sizeof(route), "/v1/nodes/%s/%s?job=%s&epoch=%" PRId64,
	         a->node_id, what, w->id, w->epoch);
	st = cnl_client_call(cl, "GET", route, NULL, 30, &reply, err,
	                     sizeof(err));
	if (st != 200) {
		json_decref(reply);
		snprintf(why, whylen, "cannot list its %s: %s", what, err);
		return st < 0 ? (int)st : -EIO;
	}
	r = cnl_wire_files_decode(reply, &files, err, sizeof(err));
	json_decref(reply);
	if (r < 0) {
		cnl_log(CNL_LOG_WARN, "reply does not decode",
		        "id=%s what=%s err=%s", w->id, what,
		        cnl_log_quote(q, sizeof(q), err));
		cnl_wire_files_done(&files);
		snprintf(why, whylen, "its %s: cnlabd's list does not decode",
		         what);
		return -EPROTO;
	}
	if ((top = open(dest,
	                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = -errno;
		cnl_wire_files_done(&files);
		snprintf(why, whylen, "cannot open %s", dest);
		return r;
	}
	/* The decoder let only relative paths through, without "." or
	 * "..": each lands beneath @dest, created anew, no link followed. */
	for (size_t i = 0; i < files.n && r == 0; i++) {
		const struct cnl_wire_file *it = &files.items[i];
		const char *base = strrchr(it->path, '/');
		_cleanup_free_ char *ep = cnl_client_url_escape(it->path);
		_cleanup_free_ char *path = NULL;
		struct cnl_client_reply rep = {0};
		size_t n =
		    strlen(a->node_id) + strlen(ep) + strlen(w->id) + 128;
		int dfd = -1, fd = -1;

		base = base ? base + 1 : it->path;
		if ((r = cnl_mkdirs_beneath(top, it->path, 0700, &dfd)) < 0 ||
		    (fd = openat(dfd, base,
		                 O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
		                     O_CLOEXEC,
		                 0600)) < 0) {
			r = r < 0 ? r : -errno;
			snprintf(why, whylen, "cannot write \"%s\": %s",
			         it->path, strerror(-r));
			if (dfd >= 0)
				close(dfd);
			break;
		}
		close(dfd);
		path = cnl_xmalloc(n);
		snprintf(path, n,
		         "/v1/nodes/%s/%s/file?job=%s&epoch=%" PRId64
		         "&path=%s",
		         a->node_id, what, w->id, w->epoch, ep);
		r = cnl_client_request(cl,
		                       &(struct cnl_client_request){
		                           .method = "GET",
		                           .path = path,
		                           .download = true,
		                           .download_fd = fd,
		                           .download_max = (uint64_t)it->size,
		                       },
		                       &rep);
		close(fd);
		if (r < 0 || rep.status != 200 || !rep.downloaded ||
		    rep.download_len != (uint64_t)it->size ||
		    strcmp(rep.download_sha256, it->sha256) != 0) {
			snprintf(why, whylen, "%s \"%s\": %s", what, it->path,
			         r < 0 ? rep.error
			         : rep.status != 200
			             ? "refused by cnlabd"
			             : "arrived damaged (size or "
			               "SHA-256 differs)");
			cnl_log(CNL_LOG_WARN, "file not fetched",
			        "id=%s what=%s file=%s status=%ld", w->id, what,
			        cnl_log_quote(qf, sizeof(qf), it->path),
			        rep.status);
			r = r < 0 ? r : -EIO;
		}
		cnl_client_reply_done(&rep);
	}
	close(top);
	if (files.n && r == 0)
		cnl_log(CNL_LOG_INFO, "files restored",
		        "id=%s what=%s files=%zu", w->id, what, files.n);
	cnl_wire_files_done(&files);
	return r;
}

int cnl_agent_deliver_files(struct cnl_agent *a, struct cnl_client *cl,
                            const struct wk *w, char *why, size_t whylen)
{
	char why2[256];
	int r =
	    cnl_agent_upload_dir(a, cl, w, w->art, "artifacts", why, whylen);

	if (cnl_agent_upload_dir(a, cl, w, w->ckpt, "checkpoints", why2,
	                         sizeof(why2)) < 0 &&
	    r == 0) {
		copy_text(why, whylen, why2);
		r = -CNL_EFIELD;
	}
	return r;
}

void cnl_agent_files_failed(struct wk *w, const char *why)
{
	w->end_state = CNL_WIRE_REPORT_FAILED;
	copy_text(w->end_msg, sizeof(w->end_msg), why);
	if (w->end_code == 0)
		w->end_code = 1; /* the job as a whole did not succeed */
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
	cnl_agent_wake(a);
	if (n)
		cnl_log(CNL_LOG_WARN, "stopped all work", "why=\"%s\" n=%zu",
		        why, n);
}

/* The heartbeat's body: the work this node runs (not what was moved),
 * and the workspaces it keeps of servers it runs nothing of now; those
 * ids in *@ret_volumes (malloc'd), *@ret_n of them. */
static json_t *heartbeat_body(struct cnl_agent *a,
                              char (**ret_volumes)[CNL_WIRE_ID_MAX],
                              size_t *ret_n)
{
	struct cnl_wire_heartbeat m = {.has_running = true,
	                               .has_volumes = true};
	size_t n_ws = cnl_agent_workspaces_list(a, &m.volumes);
	char(*regions)[sizeof(((struct wk *)0)->region)];
	uint64_t *busy, *prev_busy;
	int64_t *prev_at, now;
	bool *known;
	json_t *body;

	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < n_ws; i++)
		if (!cnl_agent_wk_find(a, m.volumes[i]))
			memmove(m.volumes[m.n_volumes++], m.volumes[i],
			        sizeof(m.volumes[0]));
	m.running = cnl_xcalloc(a->n_wk + 1, sizeof(*m.running));
	regions = cnl_xcalloc(a->n_wk + 1, sizeof(*regions));
	busy = cnl_xcalloc(a->n_wk + 1, sizeof(*busy));
	prev_busy = cnl_xcalloc(a->n_wk + 1, sizeof(*prev_busy));
	prev_at = cnl_xcalloc(a->n_wk + 1, sizeof(*prev_at));
	known = cnl_xcalloc(a->n_wk + 1, sizeof(*known));
	for (size_t i = 0; i < a->n_wk; i++) {
		struct cnl_wire_running *r = &m.running[m.n_running];

		if (a->wk[i]->gone)
			continue;
		snprintf(r->id, sizeof(r->id), "%s", a->wk[i]->id);
		r->epoch = a->wk[i]->epoch;
		if (a->wk[i]->gpu >= 0 && !a->wk[i]->ended)
			snprintf(regions[m.n_running], sizeof(regions[0]), "%s",
			         a->wk[i]->region);
		prev_busy[m.n_running] = a->wk[i]->hb_busy_ns;
		prev_at[m.n_running] = a->wk[i]->hb_at_ns;
		m.n_running++;
	}
	pthread_mutex_unlock(&a->mu);
	/* Each slice's VRAM quota and use (protocol 6), read outside the
	 * lock: what a pending shrink waits on (resize.c); and its compute
	 * use since the previous heartbeat (protocol 7, the dashboard's):
	 * its kernels' GPU time over the wall time between the two
	 * readings.  The first reading, or one after a process left (its
	 * time leaves the sum with it), tells nothing. */
	now = cnl_time_mono_ns();
	for (size_t i = 0; i < m.n_running; i++) {
		struct cnl_wire_running *r = &m.running[i];

		known[i] = cnl_agent_slice_usage(regions[i], r, &busy[i]) == 0;
		if (known[i] && prev_at[i] > 0 && now > prev_at[i] &&
		    busy[i] >= prev_busy[i]) {
			uint64_t d = busy[i] - prev_busy[i];
			uint64_t wall = (uint64_t)(now - prev_at[i]);

			r->has_util = true;
			r->util_pct = d >= wall
			                  ? 100
			                  : (int)((d * 100 + wall / 2) / wall);
		}
	}
	/* Remember this reading for the next heartbeat, on the same
	 * workload (id and epoch) if it is still there. */
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < m.n_running; i++) {
		struct wk *w =
		    known[i] ? cnl_agent_wk_find(a, m.running[i].id) : NULL;

		if (w && w->epoch == m.running[i].epoch) {
			w->hb_busy_ns = busy[i];
			w->hb_at_ns = now;
		}
	}
	pthread_mutex_unlock(&a->mu);
	free(regions);
	free(busy);
	free(prev_busy);
	free(prev_at);
	free(known);
	/* Each GPU's utilisation and used memory (protocol 7), for the
	 * dashboard; what the driver cannot tell is left out. */
	if (a->gpus) {
		const struct cnl_gpu_dev *devs;
		int n = cnl_gpus_list(a->gpus, &devs);

		for (int g = 0; g < n && g < CNL_WIRE_GPUS_MAX; g++) {
			struct cnl_gpu_telemetry t;
			struct cnl_wire_gpu_use *u = &m.gpus[m.n_gpus];

			if (cnl_gpus_telemetry(a->gpus, g, &t) < 0)
				continue;
			u->index = g;
			u->util_pct = t.util_pct >= 0 && t.util_pct <= 100
			                  ? (int)t.util_pct
			                  : -1;
			u->mem_used =
			    t.fb_used_mib >= 0 ? t.fb_used_mib << 20 : -1;
			if (u->util_pct >= 0 || u->mem_used >= 0)
				m.n_gpus++; /* else nothing to tell */
		}
	}
	body = cnl_wire_heartbeat_encode(&m);
	*ret_volumes = m.volumes;
	*ret_n = m.n_volumes;
	m.volumes = NULL;
	cnl_wire_heartbeat_done(&m);
	return body;
}

/* Queue for removal the workspaces cnlabd says belong to deleted servers:
 * only those this heartbeat listed (@sent, @n_sent), whatever else the
 * reply names. */
static void queue_drops(struct cnl_agent *a, const struct cnl_wire_node *node,
                        char (*sent)[CNL_WIRE_ID_MAX], size_t n_sent)
{
	bool any;

	pthread_mutex_lock(&a->mu);
	for (size_t k = 0; k < node->n_drop; k++) {
		bool listed = false, queued = false;

		for (size_t i = 0; i < n_sent && !listed; i++)
			listed = strcmp(sent[i], node->drop[k]) == 0;
		for (size_t i = 0; i < a->n_drop && !queued; i++)
			queued = strcmp(a->drop[i], node->drop[k]) == 0;
		if (!listed || queued)
			continue;
		a->drop =
		    cnl_xrealloc(a->drop, (a->n_drop + 1) * sizeof(*a->drop));
		memcpy(a->drop[a->n_drop++], node->drop[k], sizeof(a->drop[0]));
	}
	any = a->n_drop > 0;
	pthread_mutex_unlock(&a->mu);
	if (any)
		cnl_agent_wake(a);
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
	cnl_agent_wake(a);
}

void *cnl_agent_heartbeat(void *arg)
{
	struct cnl_agent *a = arg;
	char route[256], err[256], q[300], qr[300];

	snprintf(route, sizeof(route), "/v1/nodes/%s/heartbeat", a->node_id);
	while (!a->stop) {
		struct cnl_wire_node node = {0};
		char(*sent)[CNL_WIRE_ID_MAX] = NULL;
		size_t n_sent = 0;
		json_t *reply = NULL, *body = heartbeat_body(a, &sent, &n_sent);
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
			queue_drops(a, &node, sent, n_sent);
			cnl_agent_cred_upkeep(a, a->hb_cl);
		} else if (st == 401 || st == 403) {
			/* cnlabd is up and says this is no node of its (the
			 * credential revoked): no outage, no grace.  The lease
			 * is left to run out and the watchdogs stop the work,
			 * which cnlabd has already handed back to the queue. */
			cnl_log(CNL_LOG_WARN, "heartbeat refused",
			        "status=%ld err=%s", st,
			        cnl_log_quote(q, sizeof(q), err));
			if (cnl_time_now_ms() - a->last_hb_ok_ms > a->lease_ms)
				kill_all(a, "node credential refused by cnlabd "
				            "(revoked?)");
		} else if (cnl_time_now_ms() - a->last_hb_ok_ms <=
		           a->grace_ms) {
			/* cnlabd unreachable: alive, we keep the work going
			 * through its outage, for the grace.  (cnlabd moves
			 * work only after the node was missing while it was
			 * up; then the heartbeat's "stop" ends it here.) */
			cnl_agent_lease_touch(a);
		} else {
			kill_all(a, "outage grace expired: cnlabd unreachable");
		}
		cnl_wire_node_done(&node);
		json_decref(reply);
		free(sent);
		for (int64_t t = 0; t < a->heartbeat_ms && !a->stop; t += 50)
			usleep(50 * 1000);
	}
	return NULL;
}
