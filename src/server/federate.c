/*
 * federate.c - work forwarded to peer sites (federate.h).
 *
 * A forward's life, in its record (document of kind "forward", id the
 * local job's):
 *
 *   sending   the job left the local queue (its run record says so, its
 *             state stays "pending"); its inputs and submission go to the
 *             peer, again after an outage (the same Idempotency-Key and
 *             the same uploads: made once there)
 *   sent      the peer holds it as job "remote": its state, exit code and
 *             output are copied here each tick; a cancel here goes there
 *   ended     it ended there, and here in the same state
 *
 * A peer's refusal (4xx) puts the job back in the local queue with its run
 * record as it was.  A submission that could not be sent at all goes back
 * at once; one sent whose answer never came is sent again until a reply
 * comes (never taken back without one: it may exist there).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/fs.h"
#include "common/id.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "net/error.h"
#include "server/api-internal.h"
#include "server/federate.h"
#include "server/secrets.h"

#define KIND           "forward"
#define TICK_MS        1000
#define PER_TICK       2 /* new forwards a tick */
#define SENDING_MAX    4 /* forwards being sent at once */
#define PEERS_MAX      16
#define SOON_MS        60000 /* a local start this near: kept here */
#define RETRY_MS       60000 /* a refused job, before it is offered again */
#define LOST_MS        (2 * 60 * 1000)  /* the peer denies it this long */
#define LOG_PAGES      8                /* pages of output a tick */
#define CHUNK_MAX      (1 << 20)        /* bytes of one output chunk */
#define REPLY_MAX      (8 << 20)        /* bytes of one reply of a peer */
#define TICK_OUT_MAX   (8 << 20)        /* output copied a tick, a job */
#define OUT_MAX        (256LL << 20)    /* output kept of a forwarded job */
#define UNREACHABLE_MS (30 * 60 * 1000) /* the peer silent this long */

enum fst { F_SENDING, F_SENT, F_ENDED };
static const char *const fst_names[] = {"sending", "sent", "ended"};

struct peer {
	char name[CNL_NAME_MAX];
	char url[512];
	char cafile[4096]; /* "": the system's CAs */
	char *token;
	int64_t doc_ms; /* the document it was opened from */
	struct cnl_client *cl;
	char project[CNL_ID_MAX]; /* the peer's project the grant gives */
	int64_t backoff_until, backoff_ms, ok_ms;
	char error[256];
	bool live;
	/* this tick */
	bool ask, asked;
	long got_status;
	char got_project[CNL_ID_MAX], got_err[256];
};

struct fwd {
	char job[CNL_ID_MAX], project[CNL_ID_MAX];
	char peer[CNL_NAME_MAX], remote[CNL_ID_MAX], remote_state[24];
	char after[CNL_STORE_DOC_ID_MAX]; /* the last output chunk copied */
	enum fst st;
	bool cancel, cancel_sent, posted;
	json_t *run;     /* the job's run record before it left */
	json_t *uploads; /* the peer's upload ids of its inputs, once made */
	int64_t since_ms, lost_since, waited_ms;
	int64_t out_bytes; /* output copied here so far */
	int exit_code;
	/* this tick, off the lock */
	bool go, do_cancel;
	json_t *body;   /* its submission (sending) */
	json_t *inputs; /* [{"path", "sha256", "size", "file"}] */
	struct peer *p;
	long status; /* the submission's or the job's GET reply; 0: none */
	bool got_posted, got_cancelled;
	char got_remote[CNL_ID_MAX], got_state[24], got_err[600];
	char got_message[200];
	int got_exit;
	json_t *got_logs, *got_uploads;
};

struct cnl_federate {
	struct cnl_api *api;
	void (*note)(struct cnl_api *api, const char *job);
	pthread_t th;
	bool started;
	atomic_bool stop;
	struct peer peers[PEERS_MAX];
	size_t npeers;
	struct fwd *fw;
	size_t n, cap;
	json_t *retry; /* job id -> not offered before (ms) */
	size_t rr;     /* the peer offered the next job first */
	struct cnl_id_gen ids;
	uint64_t sent, refused, ended;
};

/* ---- records ------------------------------------------------------------- */

/* @s into @dst, cut to its size. */
static void copy(char *dst, size_t n, const char *s)
{
	size_t k = 0;

	for (; s && s[k] && k + 1 < n; k++)
		dst[k] = s[k];
	dst[k] = 0;
}

static int save(struct cnl_federate *f, const struct fwd *w, int64_t now)
{
	struct cnl_store_doc d = {0};
	json_t *o = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:b,s:b,s:b,s:O?,s:O?,s:I,s:I,s:i,s:I}",
	    "project", w->project, "peer", w->peer, "remote", w->remote,
	    "remote_state", w->remote_state, "after", w->after, "state",
	    fst_names[w->st], "cancel", w->cancel, "cancel_sent",
	    w->cancel_sent, "posted", w->posted, "run", w->run, "uploads",
	    w->uploads, "since_ms", (json_int_t)w->since_ms, "waited_ms",
	    (json_int_t)w->waited_ms, "exit_code", w->exit_code, "out_bytes",
	    (json_int_t)w->out_bytes);
	int r;

	snprintf(d.kind, sizeof(d.kind), KIND);
	snprintf(d.id, sizeof(d.id), "%s", w->job);
	d.body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	d.updated_ms = now;
	r = d.body ? cnl_store_doc_put(f->api->store, &d, false) : -ENOMEM;
	free(d.body);
	if (r < 0)
		cnl_log(CNL_LOG_ERROR, "cannot record a forwarded job",
		        "job=%s err=%s", w->job, cnl_errname(r));
	return r;
}

static void fwd_clear_tick(struct fwd *w)
{
	json_decref(w->body);
	json_decref(w->inputs);
	json_decref(w->got_logs);
	json_decref(w->got_uploads);
	w->body = w->inputs = w->got_logs = w->got_uploads = NULL;
	w->go = w->do_cancel = w->got_posted = w->got_cancelled = false;
	w->p = NULL;
	w->status = 0;
	w->got_remote[0] = w->got_state[0] = w->got_err[0] = 0;
	w->got_message[0] = 0;
}

static void fwd_free(struct fwd *w)
{
	fwd_clear_tick(w);
	json_decref(w->run);
	json_decref(w->uploads);
	w->run = w->uploads = NULL;
}

static struct fwd *fwd_add(struct cnl_federate *f)
{
	if (f->n == f->cap) {
		f->cap = 2 * f->cap + 8;
		f->fw = cnl_xrealloc(f->fw, f->cap * sizeof(*f->fw));
	}
	memset(&f->fw[f->n], 0, sizeof(f->fw[0]));
	return &f->fw[f->n++];
}

static struct fwd *fwd_find(struct cnl_federate *f, const char *job)
{
	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->fw[i].job, job) == 0)
			return &f->fw[i];
	return NULL;
}

/* Drop ended forwards from memory (their records stay). */
static void compact(struct cnl_federate *f)
{
	size_t k = 0;

	for (size_t i = 0; i < f->n; i++) {
		if (f->fw[i].st == F_ENDED) {
			fwd_free(&f->fw[i]);
			continue;
		}
		f->fw[k++] = f->fw[i];
	}
	f->n = k;
}

int cnl_federate_new(struct cnl_api *api,
                     void (*note)(struct cnl_api *api, const char *job),
                     struct cnl_federate **ret)
{
	struct cnl_federate *f = cnl_xcalloc(1, sizeof(*f));
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char after[CNL_STORE_DOC_ID_MAX] = "";
	int n = 0, r;

	f->api = api;
	f->note = note;
	f->retry = json_object();
	cnl_id_gen_init_random(&f->ids);
	do {
		r = cnl_store_doc_list(api->store, KIND, NULL,
		                       after[0] ? after : NULL,
		                       CNL_STORE_LIST_MAX, d, &n);
		for (int i = 0; r == 0 && i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			const char *st =
			    json_string_value(json_object_get(o, "state"));
			struct fwd *w;

			copy(after, sizeof(after), d[i].id);
			if (!o || !st || strcmp(st, "ended") == 0) {
				json_decref(o);
				continue;
			}
			w = fwd_add(f);
			copy(w->job, sizeof(w->job), d[i].id);
			copy(w->project, sizeof(w->project),
			     json_string_value(json_object_get(o, "project")));
			copy(w->peer, sizeof(w->peer),
			     json_string_value(json_object_get(o, "peer")));
			copy(w->remote, sizeof(w->remote),
			     json_string_value(json_object_get(o, "remote")));
			copy(w->remote_state, sizeof(w->remote_state),
			     json_string_value(
			         json_object_get(o, "remote_state")));
			copy(w->after, sizeof(w->after),
			     json_string_value(json_object_get(o, "after")));
			w->st = strcmp(st, "sent") == 0 ? F_SENT : F_SENDING;
			w->cancel = json_is_true(json_object_get(o, "cancel"));
			w->cancel_sent =
			    json_is_true(json_object_get(o, "cancel_sent"));
			w->posted = json_is_true(json_object_get(o, "posted"));
			w->run = json_incref(json_object_get(o, "run"));
			if (json_is_array(json_object_get(o, "uploads")))
				w->uploads =
				    json_incref(json_object_get(o, "uploads"));
			w->since_ms =
			    json_integer_value(json_object_get(o, "since_ms"));
			w->waited_ms =
			    json_integer_value(json_object_get(o, "waited_ms"));
			w->out_bytes =
			    json_integer_value(json_object_get(o, "out_bytes"));
			json_decref(o);
		}
		for (int i = 0; i < n; i++)
			cnl_store_doc_done(&d[i]);
	} while (r == 0 && n == CNL_STORE_LIST_MAX);
	free(d);
	if (r < 0) {
		cnl_federate_free(f);
		return r;
	}
	*ret = f;
	return 0;
}

/* ---- peers --------------------------------------------------------------- */

/* @path holds @text, mode 0600, replaced whole (a new file renamed). */
static int write_private(const char *path, const char *text)
{
	char tmp[4200];
	int fd, r = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
	          0600);
	if (fd < 0)
		return -errno;
	if (cnl_write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
		r = -EIO;
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

/*
 * Peer @name as configured: its URL into @url, the file holding its CA into
 * @cafile ("" for the system's: written under the files folder, 0600), its
 * token opened with the secrets key into *@ret_token (malloc'd: wipe and
 * free it).  0, or -errno with the reason in @err (a token that does not
 * open for its URL and CA: -EACCES).
 */
static int peer_open(struct cnl_api *api, const char *name, char *url,
                     size_t url_len, char *cafile, size_t ca_len,
                     char **ret_token, char *err, size_t errlen)
{
	json_t *o = NULL, *pl = NULL;
	const char *ca;
	char place[96];
	uint8_t *plain = NULL;
	size_t n = 0;
	int r;

	*ret_token = NULL;
	cafile[0] = 0;
	if ((r = cnl_api_doc_json(api->store, "peer", name, &o)) < 0) {
		cnl_seterr(err, errlen, "peer %s: %s", name, cnl_strerror(r));
		return r;
	}
	snprintf(place, sizeof(place), "peer/%s", name);
	ca = json_string_value(json_object_get(o, "ca"));
	if (!api->have_secrets_key ||
	    !json_string_value(json_object_get(o, "token_sealed")) ||
	    cnl_secret_open(
	        api->secrets_key, place,
	        json_string_value(json_object_get(o, "token_sealed")), &plain,
	        &n) < 0 ||
	    !(pl = json_loadb((const char *)plain, n, 0, NULL)) ||
	    !json_equal(json_object_get(o, "url"),
	                json_object_get(pl, "url")) ||
	    strcmp(ca ? ca : "",
	           json_string_value(json_object_get(pl, "ca")) ?: "") != 0) {
		cnl_seterr(err, errlen,
		           "peer %s: its token does not open with this "
		           "platform's secrets key for its URL and CA (add "
		           "the peer again)",
		           name);
		r = -EACCES;
		goto out;
	}
	snprintf(url, url_len, "%s",
	         json_string_value(json_object_get(o, "url")));
	if (ca) {
		/* The client reads a CA from a file: one of ours, private. */
		char dir[4096];

		if (!api->files_dir) {
			cnl_seterr(err, errlen,
			           "peer %s: no files folder to keep its CA in",
			           name);
			r = -CNL_ECONFIG;
			goto out;
		}
		snprintf(dir, sizeof(dir), "%s/.peer-ca", api->files_dir);
		if ((mkdir(api->files_dir, 0700) < 0 && errno != EEXIST) ||
		    (mkdir(dir, 0700) < 0 && errno != EEXIST) ||
		    (size_t)snprintf(cafile, ca_len, "%s/%s.pem", dir, name) >=
		        ca_len ||
		    write_private(cafile, ca) < 0) {
			cnl_seterr(err, errlen, "peer %s: cannot keep its CA",
			           name);
			cafile[0] = 0;
			r = -EIO;
			goto out;
		}
	}
	*ret_token =
	    cnl_xstrdup(json_string_value(json_object_get(pl, "token")));
	r = 0;
out:
	if (plain) {
		explicit_bzero(plain, n);
		free(plain);
	}
	json_decref(pl);
	json_decref(o);
	return r;
}

static void peer_close(struct peer *p)
{
	cnl_client_free(p->cl);
	p->cl = NULL;
	if (p->token) {
		explicit_bzero(p->token, strlen(p->token));
		free(p->token);
		p->token = NULL;
	}
	p->project[0] = 0;
}

static struct peer *peer_find(struct cnl_federate *f, const char *name)
{
	for (size_t i = 0; i < f->npeers; i++)
		if (strcmp(f->peers[i].name, name) == 0)
			return &f->peers[i];
	return NULL;
}

/* The peers as configured now: a changed document opens its token again
 * and starts a new client.  Under the lock. */
static void peers_refresh(struct cnl_federate *f)
{
	struct cnl_store_doc *d = cnl_xcalloc(PEERS_MAX, sizeof(*d));
	int n = 0;

	for (size_t i = 0; i < f->npeers; i++)
		f->peers[i].live = false;
	if (cnl_store_doc_list(f->api->store, "peer", NULL, NULL, PEERS_MAX, d,
	                       &n) < 0)
		n = 0;
	for (int i = 0; i < n; i++) {
		struct peer *p = peer_find(f, d[i].id);
		char err[256];

		if (!p && f->npeers < PEERS_MAX) {
			p = &f->peers[f->npeers++];
			memset(p, 0, sizeof(*p));
			copy(p->name, sizeof(p->name), d[i].id);
		}
		if (!p)
			continue;
		p->live = true;
		if (p->cl && p->doc_ms == d[i].updated_ms)
			continue;
		peer_close(p);
		p->doc_ms = d[i].updated_ms;
		if (peer_open(f->api, d[i].id, p->url, sizeof(p->url),
		              p->cafile, sizeof(p->cafile), &p->token, err,
		              sizeof(err)) < 0) {
			copy(p->error, sizeof(p->error), err);
			continue;
		}
		if (cnl_client_new(
		        &(struct cnl_client_config){
		            .base = p->url,
		            .token = p->token,
		            .cafile = p->cafile[0] ? p->cafile : NULL,
		            .user_agent = "cnlabd-federation",
		            .connect_timeout_ms = 5000,
		            .timeout_ms = 60000,
		            .idle_timeout_ms = 15000,
		            .reply_max = REPLY_MAX,
		        },
		        &p->cl) < 0) {
			copy(p->error, sizeof(p->error),
			     "cannot make a client for its URL");
			peer_close(p);
		}
	}
	for (int i = 0; i < n; i++)
		cnl_store_doc_done(&d[i]);
	free(d);
	/* Gone peers: closed (removal waits for their forwards to end). */
	for (size_t i = 0; i < f->npeers; i++)
		if (!f->peers[i].live)
			peer_close(&f->peers[i]);
}

static bool peer_ready(const struct peer *p, int64_t now)
{
	return p->live && p->cl && now >= p->backoff_until;
}

static void peer_failed(struct peer *p, int64_t now, const char *err)
{
	copy(p->error, sizeof(p->error), err);
	p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : 5000;
	if (p->backoff_ms > 5 * 60 * 1000)
		p->backoff_ms = 5 * 60 * 1000;
	p->backoff_until = now + p->backoff_ms;
}

static void peer_ok(struct peer *p, int64_t now)
{
	p->error[0] = 0;
	p->backoff_ms = 0;
	p->backoff_until = 0;
	p->ok_ms = now;
}

/* ---- deciding (under the lock) ------------------------------------------- */

/* The run record of a local job with its forward's state. */
static int job_note(struct cnl_federate *f, const struct fwd *w,
                    const char *state, int exit_code, const char *message,
                    int64_t now)
{
	struct cnl_store_job j;
	json_t *run;
	char *txt;
	int r;

	if ((r = cnl_store_job_get(f->api->store, w->job, &j)) < 0)
		return r;
	run = json_loads(j.run, 0, NULL);
	if (!json_is_object(run)) {
		json_decref(run);
		run = json_object();
	}
	json_object_set_new(
	    run, "peer",
	    json_pack("{s:s,s:s,s:s}", "name", w->peer, "job", w->remote,
	              "state",
	              w->st == F_SENDING ? "sending" : w->remote_state));
	if (message)
		json_object_set_new(run, "message", json_string(message));
	txt = json_dumps(run, JSON_COMPACT);
	json_decref(run);
	r = txt && strlen(txt) < CNL_STORE_RUN_MAX
	        ? cnl_store_job_update_run(f->api->store, w->job, state,
	                                   exit_code, now, txt)
	        : -CNL_ESIZE;
	free(txt);
	if (r < 0)
		cnl_log(CNL_LOG_ERROR, "cannot update a forwarded job",
		        "job=%s err=%s", w->job, cnl_errname(r));
	f->note(f->api, w->job);
	return r;
}

/* Job @w goes back to the local queue, its run record as it was. */
static void put_back(struct cnl_federate *f, struct fwd *w, int64_t now,
                     const char *why)
{
	struct cnl_store_job j;
	char *txt = w->run ? json_dumps(w->run, JSON_COMPACT) : NULL;
	int r;

	r = cnl_store_job_update_run(f->api->store, w->job,
	                             w->cancel ? "cancelled" : "pending",
	                             w->cancel ? -1 : 0, now, txt ? txt : "{}");
	free(txt);
	if (r == 0 && !w->cancel &&
	    cnl_store_job_get(f->api->store, w->job, &j) == 0)
		cnl_ctl_job_added(f->api->ctl, &j);
	cnl_ctl_kick(f->api->ctl);
	f->note(f->api, w->job);
	json_object_set_new(f->retry, w->job, json_integer(now + RETRY_MS));
	f->refused++;
	cnl_api_audit_as(f->api, "federation", "sched.federation", w->job, now,
	                 "refused by peer %s: %s%s", w->peer, why,
	                 w->cancel ? "; cancelled here"
	                           : "; back in the queue here");
	w->st = F_ENDED;
	save(f, w, now);
}

/* Forward @w ends here as lost (failed), with @why. */
static void lose(struct cnl_federate *f, struct fwd *w, int64_t now,
                 const char *why)
{
	char msg[200];

	snprintf(msg, sizeof(msg), "lost at peer %s: %.120s", w->peer, why);
	copy(w->remote_state, sizeof(w->remote_state), "failed");
	job_note(f, w, "failed", -1, msg, now);
	w->st = F_ENDED;
	save(f, w, now);
	f->ended++;
	cnl_api_audit_as(f->api, "federation", "sched.federation", w->job, now,
	                 "ended: %s", msg);
}

/* Whether a run record's field @v says something: not absent, null, "",
 * [] or a count of 0 or less. */
static bool given(const json_t *v)
{
	return v && !json_is_null(v) &&
	       !(json_is_string(v) && !json_string_length(v)) &&
	       !(json_is_array(v) && !json_array_size(v)) &&
	       !(json_is_integer(v) && json_integer_value(v) <= 0);
}

/* Whether the run record @run lets a job leave: nothing it asks for
 * names this site (a cluster, nodes, a dataset held here, secrets kept
 * here) and it is not part of a gang. */
static bool may_leave(const json_t *run)
{
	static const char *const here[] = {"cluster", "nodelist", "exclude",
	                                   "prefer",  "avoid",    "dataset",
	                                   "gang",    "secrets",  NULL};

	for (int i = 0; here[i]; i++)
		if (given(json_object_get(run, here[i])))
			return false;
	return true;
}

/* The submission of job @j for the peer, and its inputs' files. */
static void submission(struct cnl_federate *f, const struct cnl_store_job *j,
                       const json_t *run, struct fwd *w)
{
	static const char *const carried[] = {
	    "preemptible", "cpu_milli", "mem_mib", "gpu_types", "image", NULL};
	struct cnl_store_doc *d = cnl_xcalloc(64, sizeof(*d));
	json_t *b = json_pack("{s:s,s:s,s:i}", "command", j->command, "gpu",
	                      j->gpu_shape, "priority", j->priority);
	int n = 0;

	if (j->runtime_ms > 0)
		json_object_set_new(b, "runtime_s",
		                    json_integer(j->runtime_ms / 1000));
	for (int i = 0; carried[i]; i++)
		if (given(json_object_get(run, carried[i])))
			json_object_set(b, carried[i],
			                json_object_get(run, carried[i]));
	w->inputs = json_array();
	if (f->api->files_dir &&
	    cnl_store_doc_list(f->api->store, "input", j->id, NULL, 64, d,
	                       &n) == 0)
		for (int i = 0; i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			const char *rel =
			    json_string_value(json_object_get(o, "blob"));
			char path[4096];

			if (rel && !strstr(rel, "..") && rel[0] != '/') {
				snprintf(path, sizeof(path), "%s/%s",
				         f->api->files_dir, rel);
				json_array_append_new(
				    w->inputs,
				    json_pack(
				        "{s:O,s:O,s:O,s:s}", "path",
				        json_object_get(o, "path"), "sha256",
				        json_object_get(o, "sha256"), "size",
				        json_object_get(o, "size"), "file",
				        path));
			}
			json_decref(o);
		}
	for (int i = 0; i < n; i++)
		cnl_store_doc_done(&d[i]);
	free(d);
	w->body = b;
}

/* The next peer after @last that may take work now. */
static struct peer *next_peer(struct cnl_federate *f, size_t *rr, int64_t now)
{
	for (size_t k = 0; k < f->npeers; k++) {
		struct peer *p = &f->peers[(*rr + k) % f->npeers];

		if (peer_ready(p, now)) {
			*rr = (*rr + k + 1) % f->npeers;
			return p;
		}
	}
	return NULL;
}

static void offer(struct cnl_federate *f, int64_t now)
{
	json_t *cand, *it;
	size_t i, sending = 0;
	int taken = 0;

	for (size_t k = 0; k < f->n; k++)
		sending += f->fw[k].st == F_SENDING;
	if (sending >= SENDING_MAX)
		return;
	cand = cnl_ctl_forward_candidates(f->api->ctl, now, SOON_MS);
	json_array_foreach (cand, i, it) {
		const char *id = json_string_value(json_object_get(it, "id"));
		json_t *until = json_object_get(f->retry, id), *run;
		struct cnl_store_job j;
		struct peer *p;
		struct fwd *w;
		char msg[200];

		if (taken >= PER_TICK || sending >= SENDING_MAX)
			break;
		if (fwd_find(f, id) ||
		    (until && json_integer_value(until) > now))
			continue;
		if (cnl_store_job_get(f->api->store, id, &j) < 0)
			continue;
		run = json_loads(j.run, 0, NULL);
		if (!json_is_object(run) || !may_leave(run) ||
		    !(p = next_peer(f, &f->rr, now))) {
			json_decref(run);
			continue;
		}
		if (cnl_ctl_job_withdraw(f->api->ctl, id) < 0) {
			json_decref(run);
			continue;
		}
		w = fwd_add(f);
		copy(w->job, sizeof(w->job), id);
		copy(w->project, sizeof(w->project), j.project_id);
		copy(w->peer, sizeof(w->peer), p->name);
		w->st = F_SENDING;
		w->since_ms = now;
		w->waited_ms =
		    json_integer_value(json_object_get(it, "waited_ms"));
		w->run = run;
		snprintf(msg, sizeof(msg),
		         "forwarding to peer %s: waited %lld s here, past "
		         "the wait target of %lld s",
		         p->name, (long long)(w->waited_ms / 1000),
		         (long long)(json_integer_value(
		                         json_object_get(it, "target_ms")) /
		                     1000));
		/* The record and the job's run record in one transaction:
		 * a restart finds both or neither (never a job queued here
		 * and forwarded too). */
		if (cnl_store_tx_begin(f->api->store) < 0 ||
		    save(f, w, now) < 0 ||
		    job_note(f, w, "pending", 0, msg, now) < 0 ||
		    cnl_store_tx_commit(f->api->store) < 0) {
			cnl_store_tx_rollback(f->api->store);
			cnl_ctl_job_added(f->api->ctl, &j);
			fwd_free(w);
			f->n--;
			continue;
		}
		taken++;
		sending++;
	}
	json_decref(cand);
}

static void decide(struct cnl_federate *f, int64_t now)
{
	const char *k;
	json_t *v, *tmp;

	peers_refresh(f);
	json_object_foreach_safe (f->retry, tmp, k, v)
		if (json_integer_value(v) <= now)
			json_object_del(f->retry, k);
	offer(f, now);
	for (size_t i = 0; i < f->npeers; i++) {
		struct peer *p = &f->peers[i];

		p->ask = peer_ready(p, now) && !p->project[0];
		p->asked = false;
	}
	for (size_t i = 0; i < f->n; i++) {
		struct fwd *w = &f->fw[i];
		struct cnl_store_job j;

		fwd_clear_tick(w);
		w->p = peer_find(f, w->peer);
		if (!w->p || !w->p->live || !w->p->cl) {
			/* A peer that cannot be used (its token no longer
			 * opens: the administrator adds it again): as one
			 * that does not answer.  Never sent: back here. */
			if (!w->lost_since)
				w->lost_since = now;
			if (w->st == F_SENDING && !w->posted)
				put_back(f, w, now,
				         "the peer cannot be used (cnlab peer "
				         "list says why)");
			else if (now - w->lost_since >= UNREACHABLE_MS)
				lose(f, w, now,
				     w->p && w->p->error[0]
				         ? w->p->error
				         : "the peer cannot be used");
			continue;
		}
		if (w->st == F_SENDING && w->cancel && !w->posted) {
			put_back(f, w, now, "cancelled before it was sent");
			continue;
		}
		if (!peer_ready(w->p, now))
			continue;
		if (w->st == F_SENDING) {
			if (cnl_store_job_get(f->api->store, w->job, &j) < 0)
				continue;
			submission(f, &j, w->run, w);
			w->go = true;
		} else if (w->st == F_SENT) {
			w->go = true;
			w->do_cancel = w->cancel && !w->cancel_sent;
		}
	}
}

/* ---- acting (without the lock) ------------------------------------------- */

static bool whoami(struct peer *p)
{
	json_t *o = NULL, *m;
	long st = cnl_client_call(p->cl, "GET", "/v1/auth/whoami", NULL, 0, &o,
	                          p->got_err, sizeof(p->got_err));

	p->asked = true;
	p->got_status = st;
	if (st != 200) {
		json_decref(o);
		return false;
	}
	m = json_object_get(o, "memberships");
	if (json_array_size(m) != 1) {
		snprintf(
		    p->got_err, sizeof(p->got_err),
		    "its grant must give exactly one project; it gives %zu",
		    json_array_size(m));
		p->got_status = 0;
	} else {
		copy(p->got_project, sizeof(p->got_project),
		     json_string_value(
		         json_object_get(json_array_get(m, 0), "project_id")));
	}
	json_decref(o);
	return p->got_project[0] != 0;
}

/* Whether @s is a job state. */
static bool known_state(const char *s)
{
	static const char *const st[] = {"pending", "running",   "succeeded",
	                                 "failed",  "cancelled", NULL};

	for (int i = 0; s && st[i]; i++)
		if (strcmp(s, st[i]) == 0)
			return true;
	return false;
}

/* Whether @s may be a job id of the peer's (it goes into paths here). */
static bool id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n >= CNL_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return false;
	return true;
}

/* A refusal's words: "STATUS message". */
static const char *refusal(const struct cnl_client_reply *r, char *buf,
                           size_t len)
{
	const char *msg = NULL;

	cnl_http_error_read(r->json, NULL, &msg);
	snprintf(buf, len, "%ld %.200s", r->status, msg ? msg : "refused");
	return buf;
}

/* Upload @in's files to the peer: their upload ids into w->got_uploads.
 * 0, or -1 with the reason in w->got_err (w->status the HTTP status). */
static int upload(struct fwd *w, const char *project)
{
	size_t i;
	json_t *it;

	w->got_uploads = json_array();
	json_array_foreach (w->inputs, i, it) {
		const char *file =
		    json_string_value(json_object_get(it, "file"));
		char *en = cnl_client_url_escape(
		    json_string_value(json_object_get(it, "path")));
		char *esc = cnl_client_url_escape(project), path[1024];
		struct cnl_client_reply r;
		char why[300];
		struct stat sb;
		int fd = open(file, O_RDONLY | O_CLOEXEC), rc;

		snprintf(path, sizeof(path), "/v1/projects/%s/uploads?path=%s",
		         esc, en);
		free(en);
		free(esc);
		if (fd < 0 || fstat(fd, &sb) < 0) {
			snprintf(w->got_err, sizeof(w->got_err),
			         "cannot read its input %s: %s",
			         json_string_value(json_object_get(it, "path")),
			         strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
		rc = cnl_client_request(w->p->cl,
		                        &(struct cnl_client_request){
		                            .method = "PUT",
		                            .path = path,
		                            .upload = true,
		                            .upload_fd = fd,
		                            .upload_size = (uint64_t)sb.st_size,
		                            .sha256 = json_string_value(
		                                json_object_get(it, "sha256")),
		                        },
		                        &r);
		close(fd);
		w->status = rc == 0 ? r.status : 0;
		if (rc < 0 || r.status / 100 != 2 ||
		    !json_string_value(json_object_get(r.json, "id"))) {
			snprintf(w->got_err, sizeof(w->got_err),
			         "uploading its input %.200s: %.200s",
			         json_string_value(json_object_get(it, "path")),
			         rc < 0 ? r.error
			                : refusal(&r, why, sizeof(why)));
			cnl_client_reply_done(&r);
			return -1;
		}
		json_array_append_new(w->got_uploads,
		                      json_string(json_string_value(
		                          json_object_get(r.json, "id"))));
		cnl_client_reply_done(&r);
	}
	return 0;
}

static void send_job(struct fwd *w)
{
	const char *project =
	    w->p->project[0] ? w->p->project : w->p->got_project;
	char path[300], key[96], *esc;
	struct cnl_client_reply r;
	json_t *ups;
	int rc;

	if (!project[0]) {
		copy(w->got_err, sizeof(w->got_err),
		     w->p->got_err[0] ? w->p->got_err : "no project there yet");
		return;
	}
	esc = cnl_client_url_escape(project);
	/* The same uploads again after a lost answer: the same body, so
	 * the Idempotency-Key replays the job made then. */
	ups = w->uploads ? json_incref(w->uploads) : NULL;
	if (!ups && json_array_size(w->inputs)) {
		if (upload(w, project) < 0) {
			free(esc);
			return;
		}
		ups = json_incref(w->got_uploads);
	}
	if (json_array_size(ups))
		json_object_set(w->body, "inputs", ups);
	json_decref(ups);
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", esc);
	free(esc);
	snprintf(key, sizeof(key), "forward-%s", w->job);
	w->got_posted = true;
	rc = cnl_client_request(w->p->cl,
	                        &(struct cnl_client_request){
	                            .method = "POST",
	                            .path = path,
	                            .json = w->body,
	                            .idempotency_key = key,
	                        },
	                        &r);
	w->status = rc == 0 ? r.status : 0;
	if (rc < 0)
		copy(w->got_err, sizeof(w->got_err), r.error);
	else if (r.status / 100 != 2)
		refusal(&r, w->got_err, sizeof(w->got_err));
	else {
		const char *id =
		    json_string_value(json_object_get(r.json, "id"));

		if (id_ok(id))
			copy(w->got_remote, sizeof(w->got_remote), id);
		else
			copy(w->got_err, sizeof(w->got_err),
			     "the peer answered without a job id");
		if (known_state(
		        json_string_value(json_object_get(r.json, "state"))))
			copy(w->got_state, sizeof(w->got_state),
			     json_string_value(
			         json_object_get(r.json, "state")));
	}
	cnl_client_reply_done(&r);
}

/* The remote job's state, then its output since the last chunk copied
 * (in that order: an end seen means the output after it is whole). */
static void follow(struct fwd *w)
{
	char path[400], *esc = cnl_client_url_escape(w->remote);
	char after[CNL_STORE_DOC_ID_MAX];
	json_t *o = NULL;
	size_t bytes = 0;
	bool bad = false;
	long st;

	if (w->do_cancel) {
		snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", esc);
		st = cnl_client_call(w->p->cl, "POST", path, NULL, 0, NULL,
		                     w->got_err, sizeof(w->got_err));
		w->got_cancelled = st == 200 || st == 202 || st == 409;
	}
	snprintf(path, sizeof(path), "/v1/jobs/%s", esc);
	st = cnl_client_call(w->p->cl, "GET", path, NULL, 0, &o, w->got_err,
	                     sizeof(w->got_err));
	w->status = st > 0 ? st : 0;
	if (st == 200) {
		json_int_t x =
		    json_integer_value(json_object_get(o, "exit_code"));

		/* The peer's words are checked before they are ours. */
		if (known_state(json_string_value(json_object_get(o, "state"))))
			copy(w->got_state, sizeof(w->got_state),
			     json_string_value(json_object_get(o, "state")));
		w->got_exit = x < -255 ? -255 : x > 255 ? 255 : (int)x;
		copy(w->got_message, sizeof(w->got_message),
		     json_string_value(json_object_get(o, "message")));
	}
	json_decref(o);
	copy(after, sizeof(after), w->after);
	w->got_logs = json_array();
	for (int page = 0; st == 200 && page < LOG_PAGES; page++) {
		json_t *items, *it;
		const char *next;
		size_t i;

		snprintf(path, sizeof(path), "/v1/jobs/%s/logs?limit=500%s%s",
		         esc, after[0] ? "&after=" : "", after);
		o = NULL;
		if (cnl_client_call(w->p->cl, "GET", path, NULL, 0, &o, NULL,
		                    0) != 200) {
			/* Not this tick: the state waits for its output. */
			w->got_state[0] = 0;
			json_decref(o);
			break;
		}
		items = json_object_get(o, "items");
		json_array_foreach (items, i, it) {
			const char *id =
			    json_string_value(json_object_get(it, "id"));
			json_t *d = json_object_get(it, "data");

			/* Chunk ids move forward only: a peer that sends
			 * one back (or none) is not followed round. */
			if (!id_ok(id) || strcmp(id, after) <= 0) {
				copy(w->got_err, sizeof(w->got_err),
				     "the peer's output chunk ids do not move "
				     "forward");
				w->status = 502; /* lost if it goes on */
				bad = true;
				break;
			}
			bytes += json_string_length(
			    d ? d : json_object_get(it, "data_base64"));
			json_array_append(w->got_logs, it);
			copy(after, sizeof(after), id);
		}
		next = json_string_value(json_object_get(o, "next"));
		if (bad || !next || !json_array_size(items)) {
			json_decref(o);
			break;
		}
		json_decref(o);
		if (page == LOG_PAGES - 1 || bytes >= TICK_OUT_MAX) {
			w->got_state[0] = 0; /* more to copy first */
			break;
		}
	}
	free(esc);
}

static void act(struct cnl_federate *f)
{
	for (size_t i = 0; i < f->npeers; i++)
		if (f->peers[i].ask)
			whoami(&f->peers[i]);
	for (size_t i = 0; i < f->n && !atomic_load(&f->stop); i++) {
		struct fwd *w = &f->fw[i];

		if (!w->go)
			continue;
		if (w->st == F_SENDING)
			send_job(w);
		else
			follow(w);
	}
}

/* ---- settling (under the lock) ------------------------------------------- */

static bool ended_state(const char *s)
{
	return strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 ||
	       strcmp(s, "cancelled") == 0;
}

static void copy_logs(struct cnl_federate *f, struct fwd *w, int64_t now)
{
	size_t i;
	json_t *it;

	json_array_foreach (w->got_logs, i, it) {
		struct cnl_store_doc d = {0};
		const char *stream =
		    json_string_value(json_object_get(it, "stream"));
		json_t *data = json_object_get(it, "data"),
		       *b64 = json_object_get(it, "data_base64"), *o;
		int r;

		/* A chunk as an agent's: a stream, text or base64, bounded. */
		if (!stream ||
		    (strcmp(stream, "stdout") && strcmp(stream, "stderr")) ||
		    !(json_is_string(data ? data : b64)) ||
		    json_string_length(data ? data : b64) > CHUNK_MAX ||
		    w->out_bytes > OUT_MAX) {
			copy(w->after, sizeof(w->after),
			     json_string_value(json_object_get(it, "id")));
			continue;
		}
		w->out_bytes += (int64_t)json_string_length(data ? data : b64);
		if (w->out_bytes > OUT_MAX)
			/* Said once, in the output itself. */
			o = json_pack("{s:s,s:i,s:s}", "stream", "stderr",
			              "epoch", 1, "data",
			              "\n[cnlab: the output past 256 MiB that "
			              "the peer holds is not copied here]\n");
		else
			o = json_pack("{s:s,s:i,s:O}", "stream", stream,
			              "epoch", 1, data ? "data" : "data_base64",
			              data ? data : b64);
		snprintf(d.kind, sizeof(d.kind), "log");
		snprintf(d.parent, sizeof(d.parent), "%s", w->job);
		r = cnl_id_new(&f->ids, "log", now, d.id, sizeof(d.id));
		d.body = r >= 0 ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
		d.updated_ms = now;
		r = d.body ? cnl_store_doc_put(f->api->store, &d, true)
		           : -ENOMEM;
		free(d.body);
		if (r < 0) {
			cnl_log(CNL_LOG_ERROR,
			        "cannot keep a forwarded job's "
			        "output",
			        "job=%s err=%s", w->job, cnl_errname(r));
			w->got_state[0] = 0; /* its end after its output */
			return;
		}
		copy(w->after, sizeof(w->after),
		     json_string_value(json_object_get(it, "id")));
	}
	if (json_array_size(w->got_logs)) {
		save(f, w, now); /* where the copy is: no chunk twice */
		f->note(f->api, w->job);
	}
}

static void settle_sending(struct cnl_federate *f, struct fwd *w, int64_t now)
{
	char msg[200];

	if (w->got_uploads && !w->uploads && w->got_posted)
		w->uploads = json_incref(w->got_uploads);
	if (w->got_posted && !w->posted) {
		w->posted = true;
		save(f, w, now);
	}
	if (w->status / 100 == 2 && w->got_remote[0]) {
		peer_ok(w->p, now);
		w->st = F_SENT;
		copy(w->remote, sizeof(w->remote), w->got_remote);
		copy(w->remote_state, sizeof(w->remote_state),
		     w->got_state[0] ? w->got_state : "pending");
		save(f, w, now);
		snprintf(msg, sizeof(msg), "forwarded to peer %s as job %s",
		         w->peer, w->remote);
		job_note(f, w,
		         strcmp(w->remote_state, "running") == 0 ? "running"
		                                                 : "pending",
		         0, msg, now);
		f->sent++;
		cnl_api_audit_as(
		    f->api, "federation", "sched.federation", w->job, now,
		    "forwarded to peer %s as job %s: waited %lld s here, "
		    "past its "
		    "cluster's wait target, with no start here in sight",
		    w->peer, w->remote, (long long)(w->waited_ms / 1000));
		return;
	}
	/* Refused: back here (a token it no longer takes, or a shape or
	 * quota it will not run, alike). */
	if (w->status >= 400 && w->status < 500 && w->status != 408 &&
	    w->status != 429) {
		if (w->status == 401 || w->status == 403)
			peer_failed(w->p, now, w->got_err);
		put_back(f, w, now, w->got_err);
		return;
	}
	if (w->got_err[0])
		peer_failed(w->p, now, w->got_err);
	/* Never sent (no project there, an input the peer would not take):
	 * no copy there; back at once.  Sent and unanswered: it may exist
	 * there, so it is never taken back without a definite answer; the
	 * same Idempotency-Key makes it once, whenever the peer answers. */
	if ((w->got_err[0] && !w->posted) || (w->cancel && !w->posted))
		put_back(f, w, now,
		         w->got_err[0] ? w->got_err
		                       : "no answer from the peer");
}

static void settle_sent(struct cnl_federate *f, struct fwd *w, int64_t now)
{
	char msg[200];

	if (w->got_cancelled && !w->cancel_sent) {
		w->cancel_sent = true;
		save(f, w, now);
	}
	if (w->status != 200) {
		/* The peer denies it (a revoked grant, a job it lost), or
		 * does not answer at all (for longer). */
		if (!w->lost_since)
			w->lost_since = now;
		if (w->status == 0 || w->status == 401 || w->status == 403)
			peer_failed(w->p, now, w->got_err);
		if (now - w->lost_since <
		    (w->status == 0 ? UNREACHABLE_MS : LOST_MS))
			return;
		lose(f, w, now, w->got_err);
		return;
	}
	peer_ok(w->p, now);
	w->lost_since = 0;
	copy_logs(f, w, now);
	if (!w->got_state[0])
		return;
	if (ended_state(w->got_state)) {
		copy(w->remote_state, sizeof(w->remote_state), w->got_state);
		w->exit_code = w->got_exit;
		if (w->got_message[0])
			snprintf(msg, sizeof(msg),
			         "at peer %s (job %s): %.100s", w->peer,
			         w->remote, w->got_message);
		else
			snprintf(msg, sizeof(msg), "ran at peer %s as job %s",
			         w->peer, w->remote);
		job_note(f, w, w->got_state, w->got_exit, msg, now);
		w->st = F_ENDED;
		save(f, w, now);
		f->ended++;
		cnl_api_audit_as(f->api, "federation", "sched.federation",
		                 w->job, now,
		                 "ended %s at peer %s as job %s (exit %d)",
		                 w->got_state, w->peer, w->remote, w->got_exit);
		return;
	}
	if (strcmp(w->got_state, w->remote_state) != 0) {
		copy(w->remote_state, sizeof(w->remote_state), w->got_state);
		save(f, w, now);
		snprintf(msg, sizeof(msg), "%s at peer %s as job %s",
		         strcmp(w->got_state, "running") == 0 ? "running"
		                                              : "waiting",
		         w->peer, w->remote);
		job_note(f, w,
		         strcmp(w->got_state, "running") == 0 ? "running"
		                                              : "pending",
		         0, msg, now);
	}
}

static void settle(struct cnl_federate *f, int64_t now)
{
	for (size_t i = 0; i < f->npeers; i++) {
		struct peer *p = &f->peers[i];

		if (!p->asked || !p->live)
			continue;
		if (p->got_project[0]) {
			copy(p->project, sizeof(p->project), p->got_project);
			peer_ok(p, now);
		} else {
			peer_failed(p, now, p->got_err);
		}
		p->asked = false;
		p->got_project[0] = 0;
	}
	for (size_t i = 0; i < f->n; i++) {
		struct fwd *w = &f->fw[i];

		if (!w->go || !w->p)
			continue;
		if (w->st == F_SENDING)
			settle_sending(f, w, now);
		else if (w->st == F_SENT)
			settle_sent(f, w, now);
		fwd_clear_tick(w);
	}
	compact(f);
}

/* ---- the thread ---------------------------------------------------------- */

static void *loop(void *arg)
{
	struct cnl_federate *f = arg;

	while (!atomic_load(&f->stop)) {
		pthread_mutex_lock(&f->api->mu);
		decide(f, cnl_time_now_ms());
		pthread_mutex_unlock(&f->api->mu);
		act(f);
		pthread_mutex_lock(&f->api->mu);
		settle(f, cnl_time_now_ms());
		pthread_mutex_unlock(&f->api->mu);
		for (int64_t t = 0; t < TICK_MS && !atomic_load(&f->stop);
		     t += 50)
			nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
	}
	return NULL;
}

int cnl_federate_start(struct cnl_federate *f)
{
	int r = pthread_create(&f->th, NULL, loop, f);

	if (r)
		return -r;
	f->started = true;
	return 0;
}

void cnl_federate_stop(struct cnl_federate *f)
{
	if (!f || !f->started)
		return;
	atomic_store(&f->stop, true);
	pthread_join(f->th, NULL);
	f->started = false;
}

void cnl_federate_free(struct cnl_federate *f)
{
	if (!f)
		return;
	cnl_federate_stop(f);
	for (size_t i = 0; i < f->n; i++)
		fwd_free(&f->fw[i]);
	free(f->fw);
	for (size_t i = 0; i < f->npeers; i++)
		peer_close(&f->peers[i]);
	json_decref(f->retry);
	free(f);
}

/* ---- for the API (under the lock) ---------------------------------------- */

bool cnl_federate_cancel(struct cnl_federate *f, const char *id)
{
	struct fwd *w = f ? fwd_find(f, id) : NULL;

	if (!w || w->st == F_ENDED)
		return false;
	if (!w->cancel) {
		w->cancel = true;
		save(f, w, cnl_time_now_ms());
	}
	return true;
}

int cnl_federate_busy(struct cnl_federate *f, const char *peer)
{
	int n = 0;

	for (size_t i = 0; f && i < f->n; i++)
		n += f->fw[i].st != F_ENDED && strcmp(f->fw[i].peer, peer) == 0;
	return n;
}

void cnl_federate_peer_json(struct cnl_federate *f, const char *peer, json_t *o)
{
	struct peer *p = f ? peer_find(f, peer) : NULL;

	json_object_set_new(o, "jobs",
	                    json_integer(cnl_federate_busy(f, peer)));
	json_object_set_new(o, "last_ok",
	                    p && p->ok_ms ? cnl_api_time_json(p->ok_ms)
	                                  : json_null());
	json_object_set_new(
	    o, "error", p && p->error[0] ? json_string(p->error) : json_null());
}

void cnl_federate_metrics(struct cnl_federate *f, struct cnl_metrics_buf *mb)
{
	int by[F_ENDED] = {0};

	for (size_t i = 0; i < f->n; i++)
		if (f->fw[i].st != F_ENDED)
			by[f->fw[i].st]++;
	cnl_mb_family(mb, "cnlab_federation_jobs", "gauge",
	              "Jobs forwarded to peer sites and not ended, by state "
	              "(sending, sent).");
	for (int s = F_SENDING; s < F_ENDED; s++)
		cnl_mb_printf(mb, "cnlab_federation_jobs{state=\"%s\"} %d\n",
		              fst_names[s], by[s]);
	cnl_mb_family(mb, "cnlab_federation_forwards_total", "counter",
	              "Jobs forwarded to a peer, by result (sent: the peer "
	              "took it; refused: back in the local queue).");
	cnl_mb_printf(mb,
	              "cnlab_federation_forwards_total{result=\"sent\"} "
	              "%" PRIu64 "\n",
	              f->sent);
	cnl_mb_printf(mb,
	              "cnlab_federation_forwards_total{result=\"refused\"} "
	              "%" PRIu64 "\n",
	              f->refused);
	cnl_mb_family(mb, "cnlab_federation_ended_total", "counter",
	              "Forwarded jobs that ended at their peer.");
	cnl_mb_printf(mb, "cnlab_federation_ended_total %" PRIu64 "\n",
	              f->ended);
}
