/*
 * kube_sched.c - cnlabd schedules Kubernetes pods (kube_sched.h).
 */
#include "server/kube_sched.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/id.h"
#include "common/json.h"
#include "common/log.h"
#include "common/sshd.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/kube_map.h"
#include "server/kube_ops.h"
#include "wire/node.h"

#define S(o, k)    json_string_value(json_object_get((o), (k)))
#define USER       "kube"
#define TOKEN_NAME "kube-scheduler"
#define PODS \
	"/api/v1/pods?fieldSelector=spec.schedulerName%3D" CNL_KUBE_SCHEDULER
/* The pods on nodes that still hold what they requested. */
#define ASSIGNED                                                           \
	"/api/v1/pods?fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21" \
	"%3DSucceeded%2Cstatus.phase%21%3DFailed"
#define SLICES                      \
	"/apis/resource.k8s.io/v1/" \
	"resourceslices?fieldSelector=spec.driver%3D" CNL_KUBE_DRIVER
#define POD_CMD         "kubernetes pod " /* a pod's job's command: NS/NAME */
#define EVICT_RETRY_MS  5000
#define MAX_ATTEMPTS    5 /* bindings of one pod's jobs that failed */
#define RUN_IMAGE_MAX   (CNL_WIRE_IMAGE_MAX + 600)
#define REFUSE_RETRY_MS 30000

enum pod_st {
	P_NEW,       /* seen, not submitted */
	P_SUBMITTED, /* a job, not placed (or placed, not bound) */
	P_BOUND,     /* claim allocated, pod bound, job running */
	P_REFUSED,   /* CNLab said no; tried again later */
	P_DONE,      /* its job ended; forgotten once the pod goes */
};

struct pod {
	char uid[64], ns[64], name[254];
	json_t *obj;       /* the latest seen */
	json_t *claim_obj; /* as read at submission; NULL: read it again */
	bool gone;         /* deleted */
	enum pod_st st;
	char job[CNL_WIRE_ID_MAX];
	char claim[254], request[64];
	int node; /* index in nodes, -1 */
	int64_t epoch;
	int64_t retry_at, evict_at;
	bool evicting;
	char said[CNL_WIRE_MESSAGE_MAX]; /* the condition written last */
	int attempt;    /* jobs of this pod before this one (its key) */
	int bind_fails; /* of them, bindings that failed (claim, pod taken) */
	/* The pod of a `cnlab run` job, made by us: its log's bytes that
	 * CNLab has, and when to read it again. */
	bool run;
	char image[RUN_IMAGE_MAX]; /* a run pod's, as cnlabd made it */
	/* Its collector's, or a server's notebook's (an init container of
	 * the agent's image); "": none. */
	char collect_image[RUN_IMAGE_MAX];
	/* A notebook server's pod (cnlab.io/server), and whether its
	 * address was reported (its RUNNING, with its URL). */
	bool server, url_said;
	/* Its spec was seen changed (an image, an ephemeral container) in
	 * any version the watch brought, even one changed back since. */
	bool tampered;
	int64_t log_sent, log_at;
	int64_t log_sec, log_nsec; /* the time of the last log line taken */
	int log_same;              /* lines taken with exactly that time */
	size_t log_read;           /* bytes read at once; 0: RUN_LOG_READ */
	int64_t stuck_since;       /* its container cannot start since; 0 */
	int64_t maps_at;           /* its inputs' ConfigMaps looked at next */
	bool check_gone;           /* missing from a relist: asked again */
	int64_t seen_at;           /* first seen */
	json_t *where; /* the nodelist its job was submitted with; NULL */
};

struct node {
	char name[CNL_WIRE_NAME_MAX];
	char id[CNL_WIRE_ID_MAX];
	char cred[CNL_API_NODE_SECRET_MAX]; /* bound to it */
	uint64_t version;
	int64_t heartbeat_ms, next_hb;
	/* Gone from Kubernetes (deleted, or its GPUs no longer published):
	 * no heartbeats, so that CNLab takes it for lost; taken again if it
	 * comes back. */
	bool gone;
	/* What the pods CNLab did not place hold of it, as last listed;
	 * sent with each heartbeat once known. */
	bool others_known;
	int64_t others_cpu, others_mem;
	/* Its allocatable pods (0: not said), and how many pods CNLab did
	 * not place it runs: the kubelet admits no pod past the first. */
	int64_t pods_max, others_pods;
};

struct cnl_kube_sched {
	struct cnl_kube_sched_config cfg;
	char url[CNL_CLIENT_BASE_MAX], cafile[4096], token[CNL_AUTH_TOKEN_MAX];
	char kserver[1024], ktoken[4096], kca[4096];
	char image[CNL_WIRE_IMAGE_MAX]; /* of a run job that names none */
	char registry[512];          /* where CNLab's images are pushed; "" */
	unsigned char proof_key[32]; /* of run pods' proofs */
	/* The collector of run pods' artifacts ("": none): its image,
	 * cnlabd's URL as pods reach it, that URL's CA (PEM; NULL), and
	 * cnlabd's secret, the key of its tokens. */
	char collect_image[RUN_IMAGE_MAX], collect_url[CNL_CLIENT_BASE_MAX];
	char *collect_ca;
	unsigned char *secret;
	size_t secret_len;
	int64_t start_timeout; /* ms a run pod may stay unable to start */
	bool has_proof_key;
	struct cnl_kube *kw, *kt, *kn, *kc; /* the watches', the rest's */
	struct cnl_kube *ke;                /* evictions: no retries */
	/* Collectors' pod tokens reviewed (collect_verify), by the API's
	 * request threads, one at a time. */
	struct cnl_kube *kr;
	pthread_mutex_t review_mu;
	bool verifying; /* registered with the API */
	/* Execs and ssh sessions in servers' pods (server_exec,
	 * server_ssh): each server's pod as last seen running (id -> {ns,
	 * name, uid, epoch, image, collect_image}), and the relays' threads
	 * still going, waited for at the stop. */
	pthread_mutex_t exec_mu;
	pthread_cond_t exec_cv;
	json_t *srv_pods;
	int execs;
	bool execing;              /* registered with the API */
	atomic_bool userns_warned; /* hostUsers dropped, said once */
	struct watch *wpods, *wtjs, *wnbs;
	struct cnl_client *user; /* as "kube" */
	/* The nodes' calls, one connection for all (each node's would
	 * count against cnlabd's connections per address): the bearer is
	 * the credential of the node @as names. */
	struct cnl_client *nodecl;
	const char *as;
	pthread_t worker;
	bool started_k;
	atomic_bool stop;
	/* Events from the watcher, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	json_t *queue; /* [[type, object] ...]; "SYNC" with a list */
	/* The worker's own. */
	struct pod *pods;
	size_t n_pods, cap_pods;
	json_t *by_uid, *by_job; /* -> index */
	bool synced;             /* the pods were listed once */
	struct node *nodes;
	size_t n_nodes;
	json_t *projects; /* namespace -> [project name, id] */
	json_t *run_ns;   /* project id -> [namespace, project name] */
	json_t *budgets;  /* namespace -> its PodDisruptionBudgetList */
	json_t *knodes;   /* name -> Kubernetes node, as last listed */
	/* Inter-pod affinity: the pods on nodes as last listed (others()),
	 * and [[pod, node name] ...] of those with ours as they are now
	 * (pod_placed(); NULL: made again when asked); whether a pod with a
	 * required anti-affinity or inter-pod preferences may be among them
	 * (then every pod's nodes are checked against it, reads_others()). */
	json_t *assigned, *placed;
	bool any_anti;
	json_t *refused_nodes; /* names whose credential was refused */
	/* TrainingJobs and NotebookServers: "tj/NS/NAME", "nb/NS/NAME" ->
	 * {"obj", "made": children made, "said": the news written last}. */
	json_t *crs;
	/* Servers' workspace claims, as last listed: server id -> its
	 * namespace; said in a heartbeat, as an agent says the workspaces it
	 * keeps, and deleted once cnlabd answers that the server was. */
	json_t *workspaces;
	int64_t next_sync;
};

/* ---- the service user ---------------------------------------------------- */

int cnl_kube_sched_user(struct cnl_store *s, char *ret_token, char *err,
                        size_t errlen)
{
	struct cnl_store_user u = {0};
	struct cnl_store_doc d = {0};
	struct cnl_id_gen ids;
	char digest[CNL_AUTH_DIGEST_MAX];
	int64_t now = cnl_time_now_ms();
	int r;

	if ((r = cnl_store_tx_begin(s)) < 0)
		goto fail;
	r = cnl_store_user_get_by_name(s, USER, &u);
	if (r == -CNL_ENOTFOUND) {
		cnl_id_gen_init_random(&ids);
		memset(&u, 0, sizeof(u));
		if ((r = cnl_id_new(&ids, "usr", now, u.id, sizeof(u.id))) < 0)
			goto undo;
		snprintf(u.name, sizeof(u.name), USER);
		u.created_ms = now;
		r = cnl_store_user_create(s, &u);
	}
	if (r < 0)
		goto undo;
	if (u.password_hash[0]) {
		/* Someone's account, made before the name was reserved. */
		cnl_store_tx_rollback(s);
		cnl_seterr(err, errlen,
		           "kube: a user named %s exists and is not the "
		           "service user (it has a password); rename it",
		           USER);
		return -CNL_EDUP;
	}
	if (cnl_store_doc_get_by_name(s, "token", u.id, TOKEN_NAME, &d) == 0) {
		r = cnl_store_doc_delete(s, "token", d.id);
		cnl_store_doc_done(&d);
		if (r < 0)
			goto undo;
	}
	if ((r = cnl_api_token_issue(s, u.id, TOKEN_NAME, 0, now, ret_token,
	                             digest)) < 0)
		goto undo;
	if ((r = cnl_store_tx_commit(s)) < 0)
		goto fail;
	return 0;
undo:
	cnl_store_tx_rollback(s);
fail:
	cnl_seterr(err, errlen, "kube: the service user %s: %s", USER,
	           cnl_strerror(r));
	return r;
}

/* ---- the watcher --------------------------------------------------------- */

static void push(struct cnl_kube_sched *ks, const char *what, const char *type,
                 json_t *obj)
{
	pthread_mutex_lock(&ks->mu);
	json_array_append_new(ks->queue, json_pack("[s,O,s]", type, obj, what));
	pthread_cond_signal(&ks->cv);
	pthread_mutex_unlock(&ks->mu);
}

/* One watched collection: the pods of our scheduler, or the
 * TrainingJobs. */
struct watch {
	struct cnl_kube_sched *ks;
	struct cnl_kube *k;
	const char *path, *what; /* "pod", "tj" */
	pthread_t thread;
	bool started;
};

static int watch_event(void *ud, const char *type, json_t *obj)
{
	struct watch *w = ud;

	push(w->ks, w->what, type, obj);
	return atomic_load(&w->ks->stop) ? 1 : 0;
}

static void *watcher(void *arg)
{
	struct watch *w = arg;
	struct cnl_kube_sched *ks = w->ks;
	char err[512], rv[128];

	while (!atomic_load(&ks->stop)) {
		json_t *list = NULL;
		long st = cnl_kube_call(w->k, "GET", w->path, NULL, NULL, &list,
		                        err, sizeof(err));
		int r;

		if (st != 200 ||
		    !json_is_array(json_object_get(list, "items"))) {
			cnl_log(CNL_LOG_WARN, "kube: cannot list",
			        "what=%s err=\"%s\"", w->what, err);
			json_decref(list);
			for (int i = 0; i < 10 && !atomic_load(&ks->stop); i++)
				usleep(100 * 1000);
			continue;
		}
		snprintf(rv, sizeof(rv), "%s",
		         S(json_object_get(list, "metadata"), "resourceVersion")
		             ?: "");
		push(ks, w->what, "SYNC", json_object_get(list, "items"));
		json_decref(list);
		do
			r = cnl_kube_watch(w->k, w->path, rv, sizeof(rv),
			                   ks->cfg.watch_timeout_s, watch_event,
			                   w, err, sizeof(err));
		while (r == 0 && !atomic_load(&ks->stop));
		if (r == -ESTALE)
			cnl_log(CNL_LOG_INFO,
			        "kube: watch expired; listing again",
			        "what=%s rv=%s", w->what, rv);
		else if (r < 0 && r != -ECANCELED) {
			cnl_log(CNL_LOG_WARN, "kube: watch broke",
			        "what=%s err=\"%s\"", w->what, err);
			usleep(500 * 1000);
		}
	}
	return NULL;
}

/* ---- pods ---------------------------------------------------------------- */

static struct pod *pod_of_uid(struct cnl_kube_sched *ks, const char *uid)
{
	json_t *i = json_object_get(ks->by_uid, uid);

	return i ? &ks->pods[json_integer_value(i)] : NULL;
}

static struct pod *pod_of_job(struct cnl_kube_sched *ks, const char *job)
{
	json_t *i = json_object_get(ks->by_job, job);

	return i ? &ks->pods[json_integer_value(i)] : NULL;
}

/* Whether pod @o, once placed, bears on where other pods go: its required
 * anti-affinity, or inter-pod preferences (its preferred terms score the
 * nodes of the pods they select; a soft spread, counted too, does not, but
 * telling it apart costs more than the placed pods' list it may make). */
static bool reads_others(const json_t *o)
{
	return cnl_kube_pod_has_affinity(o, true) ||
	       cnl_kube_pod_prefers_pods(o);
}

/* A run pod whose spec changed after cnlabd made it: its job's message. */
#define TAMPERED                                                            \
	"its pod's image was changed after cnlabd made it (or a container " \
	"was added)"

static bool run_tampered(const struct pod *p);

static void pod_seen(struct cnl_kube_sched *ks, json_t *obj, bool gone)
{
	const json_t *md = json_object_get(obj, "metadata");
	const char *uid = S(md, "uid"), *ns = S(md, "namespace"),
	           *name = S(md, "name");
	struct pod *p;

	const char *sched = S(json_object_get(obj, "spec"), "schedulerName");

	/* The watch's field selector says so; a pod of another scheduler
	 * is never ours, whatever a server sends. */
	if (!sched || strcmp(sched, CNL_KUBE_SCHEDULER) != 0)
		return;
	if (!uid || !ns || !name || strlen(uid) >= sizeof(p->uid) ||
	    strlen(ns) >= sizeof(p->ns) || strlen(name) >= sizeof(p->name))
		return;
	json_decref(ks->placed); /* its labels or node may have changed */
	ks->placed = NULL;
	ks->any_anti |= reads_others(obj);
	if (!(p = pod_of_uid(ks, uid))) {
		if (gone)
			return;
		if (ks->n_pods == ks->cap_pods) {
			ks->cap_pods = ks->cap_pods ? ks->cap_pods * 2 : 64;
			ks->pods = cnl_xrealloc(
			    ks->pods, ks->cap_pods * sizeof(*ks->pods));
		}
		p = &ks->pods[ks->n_pods];
		memset(p, 0, sizeof(*p));
		snprintf(p->uid, sizeof(p->uid), "%s", uid);
		snprintf(p->ns, sizeof(p->ns), "%s", ns);
		snprintf(p->name, sizeof(p->name), "%s", name);
		p->node = -1;
		p->seen_at = cnl_time_now_ms();
		json_object_set_new(ks->by_uid, uid,
		                    json_integer((json_int_t)ks->n_pods));
		ks->n_pods++;
	}
	json_decref(p->obj);
	p->obj = json_incref(obj);
	p->gone |= gone;
	/* Each version as it comes: an image patched and patched back
	 * between two steps of the worker is still seen. */
	if (p->run && p->image[0] && run_tampered(p))
		p->tampered = true;
}

/* ---- TrainingJobs and NotebookServers (kube_ops.h) --------------------- */

/* Their table's key: "tj/NS/NAME" or "nb/NS/NAME". */
static void cr_key(const char *what, const json_t *obj, char *buf, size_t len)
{
	const json_t *md = json_object_get(obj, "metadata");

	snprintf(buf, len, "%s/%s/%s", what, S(md, "namespace") ?: "",
	         S(md, "name") ?: "");
}

static void cr_seen(struct cnl_kube_sched *ks, const char *what,
                    const char *type, json_t *o)
{
	char key[400], pre[8];
	size_t i;
	json_t *x;

	if (strcmp(type, "SYNC") == 0) {
		/* Those of this kind missing from the list went meanwhile. */
		const char *k;
		void *tmp;
		snprintf(pre, sizeof(pre), "%s/", what);
		json_t *keep = json_object();
		json_array_foreach (o, i, x) {
			json_t *had;
			cr_key(what, x, key, sizeof(key));
			had = json_object_get(ks->crs, key);
			if (had) { /* what we know of it, its object new */
				had = json_copy(had);
				json_object_set(had, "obj", x);
			}
			json_object_set_new(keep, key,
			                    had ? had
			                        : json_pack("{s:O,s:b,s:s}",
			                                    "obj", x, "made", 0,
			                                    "said", ""));
		}
		json_object_foreach_safe (ks->crs, tmp, k, x)
			if (strncmp(k, pre, strlen(pre)) == 0)
				json_object_del(ks->crs, k);
		json_object_update(ks->crs, keep);
		json_decref(keep);
		return;
	}
	cr_key(what, o, key, sizeof(key));
	if (strcmp(type, "DELETED") == 0) {
		json_object_del(ks->crs, key);
		return;
	}
	x = json_object_get(ks->crs, key);
	if (x)
		json_object_set(x, "obj", o);
	else
		json_object_set_new(ks->crs, key,
		                    json_pack("{s:O,s:b,s:s}", "obj", o, "made",
		                              0, "said", ""));
}

static void cr_patch(struct cnl_kube_sched *ks, const char *what,
                     const char *ns, const char *name, json_t *patch)
{
	char path[512], err[256];

	char *en = cnl_client_url_escape(name), *es = cnl_client_url_escape(ns);
	snprintf(path, sizeof(path),
	         "/apis/cnlab.io/v1alpha1/namespaces/%s/%s/%s/status", es,
	         strcmp(what, "tj") == 0 ? "trainingjobs" : "notebookservers",
	         en);
	free(en);
	free(es);
	long st = cnl_kube_call(ks->kc, "PATCH", path, patch,
	                        "application/merge-patch+json", NULL, err,
	                        sizeof(err));
	if (st != 200 && st != 404)
		cnl_log(CNL_LOG_WARN,
		        "kube: cannot write a custom resource's "
		        "status",
		        "what=%s name=%s/%s err=\"%s\"", what, ns, name, err);
}

/* A status of @what's: from the TrainingJob phases, the NotebookServer's
 * own (a server that ended is Stopped). */
static json_t *cr_status(const char *what, const char *ns, const char *name,
                         const char *phase, const char *job, const char *node,
                         int code, const char *msg, long long gen)
{
	char url[512];

	if (strcmp(what, "tj") == 0)
		return cnl_kube_tj_status(phase, job, node, code, msg, gen);
	if (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Cancelled") == 0)
		phase = "Stopped";
	snprintf(url, sizeof(url), "http://%s.%s.svc:8888", name, ns);
	return cnl_kube_nb_status(phase, job, node, url, msg, gen);
}

static long long cr_generation(const json_t *t)
{
	return (long long)json_integer_value(json_object_get(
	    json_object_get(json_object_get(t, "obj"), "metadata"),
	    "generation"));
}

/* The table entry of the custom resource that controls pod @p (its uid in
 * the pod's owner reference, controller true), its kind's "tj" or "nb"
 * into *@ret_what and its name into *@ret_name; NULL when none does (a
 * tenant's pod may name any owner it likes: it does not speak for it). */
static json_t *cr_entry(struct cnl_kube_sched *ks, const struct pod *p,
                        const char **ret_what, const char **ret_name)
{
	const char *kind = NULL, *owner = cnl_kube_cr_owner(p->obj, &kind);
	const char *what;
	char key[400];
	json_t *t;

	if (!owner)
		return NULL;
	what = strcmp(kind, "TrainingJob") == 0 ? "tj" : "nb";
	snprintf(key, sizeof(key), "%s/%s/%s", what, p->ns, owner);
	t = json_object_get(ks->crs, key);
	if (!t || !cnl_kube_cr_controls(json_object_get(t, "obj"), p->obj))
		return NULL;
	if (ret_what)
		*ret_what = what;
	if (ret_name)
		*ret_name = owner;
	return t;
}

/* What happened to pod @p, in the status of the custom resource that
 * owns it (if one does). */
static void tj_news(struct cnl_kube_sched *ks, const struct pod *p,
                    const char *phase, const char *node, int code,
                    const char *msg)
{
	const char *what = NULL, *owner = NULL;
	char said[256];
	json_t *t = cr_entry(ks, p, &what, &owner), *patch;

	if (!t)
		return;
	snprintf(said, sizeof(said), "%s %s %s", phase, p->job, msg ? msg : "");
	if (t && strcmp(S(t, "said") ?: "", said) == 0)
		return;
	patch = cr_status(what, p->ns, owner, phase, p->job, node, code, msg,
	                  t ? cr_generation(t) : 0);
	cr_patch(ks, what, p->ns, owner, patch);
	json_decref(patch);
	if (t)
		json_object_set_new(t, "said", json_string(said));
}

static const char *project_of(struct cnl_kube_sched *ks, const char *ns,
                              char *name, size_t len);

/* The GPU shape of CNLab profile @name into @shape: 0, or -1 with @err. */
static int profile_shape(struct cnl_kube_sched *ks, const char *name,
                         char *shape, size_t len, char *err, size_t errlen)
{
	char path[512] = "/v1/profiles?limit=100";

	for (int pages = 0; pages < 100; pages++) {
		json_t *o = NULL, *x;
		const char *next;
		size_t i;

		if (cnl_client_call(ks->user, "GET", path, NULL, 0, &o, err,
		                    errlen) != 200) {
			json_decref(o);
			return -1;
		}
		json_array_foreach (json_object_get(o, "items"), i, x)
			if (S(x, "name") && S(x, "gpu") &&
			    strcmp(S(x, "name"), name) == 0) {
				snprintf(shape, len, "%s", S(x, "gpu"));
				json_decref(o);
				return 0;
			}
		if (!(next = S(o, "next"))) {
			json_decref(o);
			break;
		}
		char *e = cnl_client_url_escape(next);
		snprintf(path, sizeof(path), "/v1/profiles?limit=100&after=%s",
		         e);
		free(e);
		json_decref(o);
	}
	cnl_seterr(err, errlen,
	           "spec.profile %s: no such profile (cnlab "
	           "profiles list)",
	           name);
	return -1;
}

/* POST @obj to the collection @coll of namespace @ns ("pods" in the
 * core group, or GROUP/VERSION/RESOURCE); 0 when made, 1 when there
 * already, -1. */
static int make(struct cnl_kube_sched *ks, const char *ns, const char *coll,
                json_t *obj, char *err, size_t errlen)
{
	char path[512];
	long st;

	if (!obj)
		return 0;
	if (strchr(coll, '/')) {
		const char *res = strrchr(coll, '/');
		snprintf(path, sizeof(path), "/apis/%.*s/namespaces/%s%s",
		         (int)(res - coll), coll, ns, res);
	} else {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/%s", ns,
		         coll);
	}
	st = cnl_kube_call(ks->kc, "POST", path, obj, NULL, NULL, err, errlen);
	return st == 200 || st == 201 ? 0 : st == 409 ? 1 : -1;
}

/* Make the children of the TrainingJobs and NotebookServers that have
 * none yet. */
static void tj_reconcile(struct cnl_kube_sched *ks)
{
	const char *key;
	json_t *t;
	void *tmp;

	json_object_foreach_safe (ks->crs, tmp, key, t) {
		json_t *o = json_object_get(t, "obj");
		json_t *claim = NULL, *pod = NULL, *svc = NULL, *pvc = NULL;
		const json_t *md = json_object_get(o, "metadata");
		const char *ns = S(md, "namespace"), *name = S(md, "name");
		const char *phase = S(json_object_get(o, "status"), "phase");
		char err[512], pname[CNL_WIRE_NAME_MAX], what[4], shape[80];
		int r;

		if (atomic_load(&ks->stop))
			break;

		snprintf(what, sizeof(what), "%.2s", key);
		bool remake = json_is_true(json_object_get(t, "remake"));
		if (json_is_true(json_object_get(t, "made")) || !ns || !name ||
		    json_object_get(md, "deletionTimestamp") ||
		    json_integer_value(json_object_get(t, "retry_at")) >
		        cnl_time_now_ms())
			continue;
		if (phase && *phase && !remake) { /* made by an earlier run */
			json_object_set_new(t, "made", json_true());
			continue;
		}
		if (!project_of(ks, ns, pname, sizeof(pname)))
			continue;
		const char *prof = S(json_object_get(o, "spec"), "profile");
		if (strcmp(what, "tj") == 0 && prof &&
		    (r = profile_shape(ks, prof, shape, sizeof(shape), err,
		                       sizeof(err))) < 0)
			; /* refused below, naming the profile */
		else if (strcmp(what, "tj") == 0)
			r = cnl_kube_tj_children(o, pname, prof ? shape : NULL,
			                         &claim, &pod, err,
			                         sizeof(err));
		else if ((r = profile_shape(
		              ks,
		              S(json_object_get(o, "spec"), "profile") ?: "",
		              shape, sizeof(shape), err, sizeof(err))) == 0)
			r = cnl_kube_nb_children(o, pname, shape, &claim, &pod,
			                         &svc, &pvc, err, sizeof(err));
		if (r == 0 && ks->cfg.user_namespaces)
			cnl_kube_pod_own_users(pod);
		if (r < 0) {
			json_t *patch =
			    cr_status(what, ns, name, "Failed", "", "", -256,
			              err, cr_generation(t));
			cr_patch(ks, what, ns, name, patch);
			json_decref(patch);
			json_object_set_new(t, "made", json_true());
			cnl_log(CNL_LOG_INFO, "kube: custom resource refused",
			        "what=%s name=%s/%s why=\"%s\"", what, ns, name,
			        err);
			continue;
		}
		r = make(ks, ns, "persistentvolumeclaims", pvc, err,
		         sizeof(err));
		if (r >= 0)
			r = make(ks, ns, "services", svc, err, sizeof(err));
		if (r >= 0)
			r = make(ks, ns, "resource.k8s.io/v1/resourceclaims",
			         claim, err, sizeof(err));
		/* Made again after a pre-emption: the evicted pod (or its
		 * claim) may not be gone yet; an earlier run's pod is fine.
		 * A claim there, not going and not allocated, is the one an
		 * earlier try of this remake made. */
		if (r == 1 && remake && claim) {
			char cpath[512], cerr[256];
			json_t *c = NULL;
			snprintf(cpath, sizeof(cpath),
			         "/apis/resource.k8s.io/v1/namespaces/%s/"
			         "resourceclaims/%s",
			         ns,
			         S(json_object_get(claim, "metadata"), "name")
			             ?: "");
			if (cnl_kube_call(ks->kc, "GET", cpath, NULL, NULL, &c,
			                  cerr, sizeof(cerr)) == 200 &&
			    !json_object_get(json_object_get(c, "metadata"),
			                     "deletionTimestamp") &&
			    !json_object_get(json_object_get(c, "status"),
			                     "allocation"))
				r = 0;
			json_decref(c);
		}
		if (r == 1 && remake)
			snprintf(err, sizeof(err),
			         "its last claim is still "
			         "there");
		else if (r >= 0)
			r = make(ks, ns, "pods", pod, err, sizeof(err));
		if (r == 1 && remake) {
			snprintf(err, sizeof(err),
			         "its last pod is still there");
			r = -1;
		}
		json_decref(claim);
		json_decref(pod);
		json_decref(svc);
		json_decref(pvc);
		if (r >= 0) {
			json_t *patch =
			    cr_status(what, ns, name, "Pending", "", "", -256,
			              remake ? "pre-empted: its new pod is made"
			                     : "its pod is made",
			              cr_generation(t));
			cr_patch(ks, what, ns, name, patch);
			json_decref(patch);
			json_object_set_new(t, "made", json_true());
			json_object_del(t, "remake");
		} else if (remake) { /* soon again */
			json_object_set_new(
			    t, "retry_at",
			    json_integer(cnl_time_now_ms() + 500));
		} else {
			/* Tried again in 10 s (a namespace may bind the
			 * workloads role later). */
			json_object_set_new(
			    t, "retry_at",
			    json_integer(cnl_time_now_ms() + 10000));
			cnl_log(CNL_LOG_WARN,
			        "kube: cannot make a custom resource's objects",
			        "what=%s name=%s/%s err=\"%s\"", what, ns, name,
			        err);
		}
	}
}

/* Take what the watcher saw. */
static void drain(struct cnl_kube_sched *ks, int64_t wait_ms)
{
	json_t *q;
	size_t i, j;
	json_t *e, *x;

	pthread_mutex_lock(&ks->mu);
	if (json_array_size(ks->queue) == 0 && wait_ms > 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += wait_ms / 1000;
		ts.tv_nsec += (wait_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&ks->cv, &ks->mu, &ts);
	}
	q = ks->queue;
	ks->queue = json_array();
	pthread_mutex_unlock(&ks->mu);
	json_array_foreach (q, i, e) {
		const char *type = json_string_value(json_array_get(e, 0));
		json_t *o = json_array_get(e, 1);

		const char *what = json_string_value(json_array_get(e, 2));
		if (strcmp(what, "pod") != 0) {
			cr_seen(ks, what, type, o);
			continue;
		}
		if (strcmp(type, "SYNC") == 0) {
			ks->synced = true;
			/* A fresh list: what it lacks was deleted meanwhile. */
			json_t *seen = json_object();
			json_array_foreach (o, j, x) {
				pod_seen(ks, x, false);
				json_object_set_new(
				    seen,
				    S(json_object_get(x, "metadata"), "uid")
				        ?: "",
				    json_true());
			}
			/* (A run pod made after that list was taken is
			 * not in it: asked again, not taken for gone.) */
			for (size_t k = 0; k < ks->n_pods; k++)
				if (!json_object_get(seen, ks->pods[k].uid)) {
					if (ks->pods[k].run)
						ks->pods[k].check_gone = true;
					else
						ks->pods[k].gone = true;
				}
			json_decref(seen);
		} else {
			pod_seen(ks, o, strcmp(type, "DELETED") == 0);
		}
	}
	json_decref(q);
}

static void pod_path(const struct pod *p, const char *sub, char *buf,
                     size_t len)
{
	snprintf(buf, len, "/api/v1/namespaces/%s/pods/%s%s%s", p->ns, p->name,
	         sub ? "/" : "", sub ? sub : "");
}

/* The pod's PodScheduled condition: False, with @msg ("cnlab: ..."),
 * written when it changes. */
static void say(struct cnl_kube_sched *ks, struct pod *p, const char *reason,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void say(struct cnl_kube_sched *ks, struct pod *p, const char *reason,
                const char *fmt, ...)
{
	char msg[CNL_WIRE_MESSAGE_MAX], path[512], err[256], now[40];
	va_list ap;
	json_t *patch;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (strcmp(msg, p->said) == 0)
		return;
	snprintf(p->said, sizeof(p->said), "%s", msg);
	cnl_time_format_rfc3339(cnl_time_now_ms() / 1000 * 1000, now,
	                        sizeof(now));
	/* Seconds only: the API server's metav1.Time. */
	char *dot = strchr(now, '.');
	if (dot)
		snprintf(dot, 2, "Z");
	patch =
	    json_pack("{s:{s:[{s:s,s:s,s:s,s:s,s:s}]}}", "status", "conditions",
	              "type", "PodScheduled", "status", "False", "reason",
	              reason, "message", msg, "lastTransitionTime", now);
	pod_path(p, "status", path, sizeof(path));
	long st = cnl_kube_call(ks->kc, "PATCH", path, patch,
	                        "application/strategic-merge-patch+json", NULL,
	                        err, sizeof(err));
	json_decref(patch);
	if (st != 200 && st != 404)
		cnl_log(CNL_LOG_WARN, "kube: cannot write a pod's condition",
		        "pod=%s/%s err=\"%s\"", p->ns, p->name, err);
}

/* The id of the project named @name among those "kube" belongs to, or
 * @name itself when it belongs to none of that name. */
static const char *project_id(struct cnl_kube_sched *ks, const char *name,
                              char *buf, size_t len)
{
	char path[512] = "/v1/projects?limit=100", err[256];

	snprintf(buf, len, "%s", name);
	for (int pages = 0; pages < 100; pages++) {
		json_t *o = NULL, *x;
		const char *next;
		size_t i;

		if (cnl_client_call(ks->user, "GET", path, NULL, 0, &o, err,
		                    sizeof(err)) != 200) {
			json_decref(o);
			return buf;
		}
		json_array_foreach (json_object_get(o, "items"), i, x)
			if (S(x, "name") && S(x, "id") &&
			    strcmp(S(x, "name"), name) == 0) {
				snprintf(buf, len, "%s", S(x, "id"));
				json_decref(o);
				return buf;
			}
		next = S(o, "next");
		if (!next) {
			json_decref(o);
			return buf;
		}
		char *e = cnl_client_url_escape(next);
		snprintf(path, sizeof(path), "/v1/projects?limit=100&after=%s",
		         e);
		free(e);
		json_decref(o);
	}
	return buf;
}

/* The project of namespace @ns, its name into @name (cached until the
 * next node sync); its id, or NULL when the namespace cannot be read. */
static const char *project_of(struct cnl_kube_sched *ks, const char *ns,
                              char *name, size_t len)
{
	json_t *o = NULL, *have;
	char path[256], err[256], id[CNL_WIRE_ID_MAX];
	const char *p;

	if ((have = json_object_get(ks->projects, ns))) {
		snprintf(name, len, "%s",
		         json_string_value(json_array_get(have, 0)));
		return json_string_value(json_array_get(have, 1));
	}
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s", ns);
	if (cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
	                  sizeof(err)) != 200 ||
	    !(p = cnl_kube_project_of(o))) {
		json_decref(o);
		return NULL;
	}
	snprintf(name, len, "%s", p);
	project_id(ks, p, id, sizeof(id));
	json_object_set_new(ks->projects, ns, json_pack("[s,s]", p, id));
	json_decref(o);
	return json_string_value(
	    json_array_get(json_object_get(ks->projects, ns), 1));
}

static void claim_url(const struct pod *p, const char *sub, char *buf,
                      size_t len)
{
	snprintf(buf, len,
	         "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s%s%s",
	         p->ns, p->claim, sub ? "/" : "", sub ? sub : "");
}

static void track_job(struct cnl_kube_sched *ks, struct pod *p, const char *job)
{
	snprintf(p->job, sizeof(p->job), "%s", job);
	json_object_set_new(ks->by_job, job,
	                    json_integer((json_int_t)(p - ks->pods)));
}

/* Cancel CNLab job @id as the service user (its answer is not needed:
 * a job that ended already stays as it is). */
static void cancel_job(struct cnl_kube_sched *ks, const char *id)
{
	char path[256], err[256];

	snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", id);
	(void)cnl_client_call(ks->user, "POST", path, NULL, 0, NULL, err,
	                      sizeof(err));
}

/* Whether a PodDisruptionBudget of @p's namespace selects it (by its
 * matchLabels; one with matchExpressions is taken to).  Such a pod is
 * submitted as not pre-emptible: CNLab then never picks it as a victim,
 * and no eviction has to meet its budget. */
static bool budgeted(struct cnl_kube_sched *ks, const struct pod *p)
{
	json_t *list = NULL, *b;
	char path[256], err[256];
	const json_t *labels =
	    json_object_get(json_object_get(p->obj, "metadata"), "labels");
	bool hit = false;
	size_t i;

	/* Listed once per namespace until the next node sync (10 s). */
	if ((list = json_object_get(ks->budgets, p->ns))) {
		json_incref(list);
	} else {
		snprintf(path, sizeof(path),
		         "/apis/policy/v1/namespaces/%s/poddisruptionbudgets",
		         p->ns);
		if (cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &list, err,
		                  sizeof(err)) != 200) {
			json_decref(list);
			return true; /* unknown: the safe side */
		}
		json_object_set(ks->budgets, p->ns, list);
	}
	json_array_foreach (json_object_get(list, "items"), i, b) {
		const json_t *sel =
		    json_object_get(json_object_get(b, "spec"), "selector");
		const json_t *ml = json_object_get(sel, "matchLabels");
		const char *k;
		json_t *v;
		bool all = true;

		if (json_array_size(json_object_get(sel, "matchExpressions"))) {
			hit = true;
			break;
		}
		json_object_foreach ((json_t *)ml, k, v)
			all &= json_equal(json_object_get(labels, k), v);
		if (all) {
			hit = true;
			break;
		}
	}
	json_decref(list);
	return hit;
}

/* Kubernetes node @name as last listed; NULL. */
static const json_t *knode(const struct cnl_kube_sched *ks, const char *name)
{
	return json_object_get(ks->knodes, name);
}

#define NODELIST_MAX   16  /* cnlabd's "nodelist", "exclude": names, */
#define NODELIST_BYTES 512 /* and their bytes together */

/* Append @name to @a unless it is full; false when it was. */
static bool list_add(json_t *a, size_t *bytes, const char *name)
{
	if (json_array_size(a) >= NODELIST_MAX ||
	    *bytes + strlen(name) > NODELIST_BYTES)
		return false;
	json_array_append_new(a, json_string(name));
	*bytes += strlen(name);
	return true;
}

/* Whether pod @o's phase is an end (its node holds nothing for it). */
static bool phase_ended(const json_t *o)
{
	const char *ph = S(json_object_get(o, "status"), "phase");
	return ph &&
	       (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0);
}

/* The pods on nodes, for pod @p's required inter-pod rules and hard
 * topology spread: NULL when none can apply (it has neither, and no pod
 * placed has an anti-affinity). */
static const json_t *pod_placed(struct cnl_kube_sched *ks, const struct pod *p)
{
	const json_t *x;
	size_t i;

	if (!ks->any_anti && !cnl_kube_pod_has_affinity(p->obj, false) &&
	    !cnl_kube_pod_has_spread(p->obj) &&
	    !cnl_kube_pod_prefers_pods(p->obj))
		return NULL;
	if (ks->placed)
		return ks->placed;
	ks->placed = json_array();
	/* Ours as the watch and our bindings have them... */
	for (size_t k = 0; k < ks->n_pods; k++) {
		const struct pod *q = &ks->pods[k];
		const char *on =
		    q->st == P_BOUND && q->node >= 0
		        ? ks->nodes[q->node].name
		        : S(json_object_get(q->obj, "spec"), "nodeName");
		if (!q->gone && q->obj && on && on[0] && !phase_ended(q->obj))
			json_array_append_new(ks->placed,
			                      json_pack("[O,s]", q->obj, on));
	}
	/* ... and the others' as last listed. */
	json_array_foreach (json_object_get(ks->assigned, "items"), i, x) {
		const char *uid = S(json_object_get(x, "metadata"), "uid");
		const char *on = S(json_object_get(x, "spec"), "nodeName");
		if (uid && on && !pod_of_uid(ks, uid))
			json_array_append_new(ks->placed,
			                      json_pack("[O,s]", x, on));
	}
	return ks->placed;
}

/*
 * Of @p's @n nodes @fit (indices into ks->nodes) the best for its
 * preferences (cnl_kube_pref_best) as the job's fields into *@ret: NULL
 * when they are all alike, else {"prefer": [...]} when the best fit in
 * one, else {"avoid": [...]} (the others), else the first of the best in
 * a "prefer": fewer nodes first than it could have, none that it should
 * not.
 */
static void pod_prefs(struct cnl_kube_sched *ks, const struct pod *p,
                      const json_t *placed, const size_t *fit, size_t n,
                      json_t **ret)
{
	struct cnl_kube_pref *pr = cnl_xcalloc(n, sizeof(*pr));
	bool *best = cnl_xcalloc(n, sizeof(*best));
	struct cnl_kube_spread *soft =
	    placed ? cnl_kube_spread_new(p->obj, ks->knodes, placed, true)
	           : NULL;
	json_t *yes = json_array(), *no = json_array();
	size_t yb = 0, nb = 0;
	bool yes_full = false, no_full = false;

	*ret = NULL;
	for (size_t i = 0; i < n; i++)
		cnl_kube_pref_of(p->obj, ks->knodes, ks->nodes[fit[i]].name,
		                 placed, soft, &pr[i]);
	cnl_kube_spread_free(soft);
	if (cnl_kube_pref_best(pr, n, best) < n) {
		for (size_t i = 0; i < n; i++) {
			const char *name = ks->nodes[fit[i]].name;
			if (best[i])
				yes_full |= !list_add(yes, &yb, name);
			else
				no_full |= !list_add(no, &nb, name);
		}
		*ret = !yes_full || no_full ? json_pack("{s:O}", "prefer", yes)
		                            : json_pack("{s:O}", "avoid", no);
	}
	json_decref(yes);
	json_decref(no);
	free(best);
	free(pr);
}

/*
 * The CNLab nodes @p may go to (its nodeSelector, required node affinity,
 * tolerations against the nodes' taints) into *@ret, as the job's fields:
 * NULL when every one of ours may take it, else {"nodelist": [...]} when
 * those fit in one, else {"exclude": [...]} (the others, a gone node
 * among them: a node that joins later is looked at within kube_resync,
 * renodes(), and at binding, assignments()), else the first that fit in a
 * nodelist: fewer nodes than it could use, never one it may not.  With
 * @prefs, those of them it prefers into *@prefs (pod_prefs()).
 * -ENOENT, with @err saying why of each, when none may.
 */
static int pod_nodes(struct cnl_kube_sched *ks, const struct pod *p,
                     json_t **ret, json_t **prefs, char *err, size_t len)
{
	json_t *ok = json_array(), *no = json_array();
	size_t okb = 0, nob = 0, used = 0, fit = 0;
	size_t *fits = cnl_xcalloc(ks->n_nodes + 1, sizeof(*fits));
	bool ok_full = false, no_full = false;
	char why[256];
	const json_t *placed = pod_placed(ks, p);
	struct cnl_kube_spread *sp =
	    placed ? cnl_kube_spread_new(p->obj, ks->knodes, placed, false)
	           : NULL;

	*ret = NULL;
	if (prefs)
		*prefs = NULL;
	err[0] = '\0';
	for (size_t k = 0; k < ks->n_nodes; k++) {
		const struct node *n = &ks->nodes[k];
		const json_t *obj;

		if (n->gone || !(obj = knode(ks, n->name))) {
			no_full |= !list_add(no, &nob, n->name);
			continue; /* gone: it may come back unfit */
		}
		if (!cnl_kube_node_fits(p->obj, obj, why, sizeof(why)) ||
		    (placed &&
		     !cnl_kube_pod_affinity_fits(p->obj, n->name, ks->knodes,
		                                 placed, why, sizeof(why))) ||
		    !cnl_kube_spread_fits(sp, n->name, why, sizeof(why))) {
			/* Each node's reason, while there is room. */
			int w = snprintf(err + used, len - used, "%s%s: %s",
			                 used ? "; " : "", n->name, why);
			if (w > 0 && (size_t)w < len - used)
				used += (size_t)w;
			no_full |= !list_add(no, &nob, n->name);
			continue;
		}
		fits[fit++] = k;
		ok_full |= !list_add(ok, &okb, n->name);
	}
	cnl_kube_spread_free(sp);
	if (fit && prefs)
		pod_prefs(ks, p, placed, fits, fit, prefs);
	free(fits);
	if (!fit) {
		json_decref(ok);
		json_decref(no);
		return ks->n_nodes ? -ENOENT : 0; /* none yet: CNLab says so */
	}
	if (fit < ks->n_nodes)
		*ret = !ok_full || no_full ? json_pack("{s:O}", "nodelist", ok)
		                           : json_pack("{s:O}", "exclude", no);
	json_decref(ok);
	json_decref(no);
	return 0;
}

/* Submit pod @p as a job of its project. */
static void submit(struct cnl_kube_sched *ks, struct pod *p, int64_t now)
{
	struct cnl_kube_ask a;
	json_t *claim = NULL, *body, *reply = NULL, *where = NULL,
	       *prefs = NULL;
	char err[512], path[512], key[96], cmd[400], pname[CNL_WIRE_NAME_MAX];
	const char *project, *id;
	int r;

	p->retry_at = now + 1000;
	r = cnl_kube_pod_claim(p->obj, p->claim, sizeof(p->claim), err,
	                       sizeof(err));
	if (r == -EAGAIN)
		return; /* its claim is being made from the template */
	if (r < 0)
		goto refuse;
	if (p->claim[0]) {
		claim_url(p, NULL, path, sizeof(path));
		long st = cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &claim,
		                        err, sizeof(err));
		if (st != 200) {
			json_decref(claim);
			if (st != 404) /* 404: not made yet */
				cnl_log(CNL_LOG_WARN,
				        "kube: cannot read a claim",
				        "pod=%s/%s err=\"%s\"", p->ns, p->name,
				        err);
			return;
		}
		/* Another pod's already: CNLab would account one slice for
		 * two pods, and never bind this one. */
		const json_t *cst = json_object_get(claim, "status");
		const json_t *rf =
		    json_array_get(json_object_get(cst, "reservedFor"), 0);
		if ((rf &&
		     (!S(rf, "uid") || strcmp(S(rf, "uid"), p->uid) != 0)) ||
		    (!rf && json_object_get(cst, "allocation"))) {
			json_decref(claim);
			snprintf(
			    err, sizeof(err),
			    "ResourceClaim %s is allocated or reserved for "
			    "another pod; CNLab places a claim for one pod",
			    p->claim);
			goto refuse;
		}
	}
	r = cnl_kube_ask_of(p->obj, claim, &a, err, sizeof(err));
	json_decref(p->claim_obj);
	p->claim_obj = claim; /* the first try of its allocation */
	if (r < 0)
		goto refuse;
	snprintf(p->request, sizeof(p->request), "%s", a.request);
	if (!(project = project_of(ks, p->ns, pname, sizeof(pname))))
		return;
	/* The new pod of a pre-empted TrainingJob: the same job, waiting
	 * again, not a new one (its place in the queue is kept). */
	json_t *cr = cr_entry(ks, p, NULL, NULL);
	if (cr && S(cr, "job") && strlen(S(cr, "job")) < sizeof(p->job)) {
		track_job(ks, p, S(cr, "job"));
		json_object_del(cr, "job");
		p->st = P_SUBMITTED;
		say(ks, p, "Unschedulable",
		    "cnlab: waiting as job %s of project %s (%s), pre-empted "
		    "before",
		    p->job, pname, a.shape);
		return;
	}
	/* Where it may go, as kube-scheduler would let it; taken once, at
	 * submission. */
	if (pod_nodes(ks, p, &where, &prefs, path, sizeof(path)) < 0) {
		snprintf(err, sizeof(err),
		         "no node of CNLab's may take it (%.400s)", path);
		goto refuse;
	}
	if (a.preemptible && budgeted(ks, p))
		a.preemptible = 0;
	snprintf(cmd, sizeof(cmd), POD_CMD "%s/%s", p->ns, p->name);
	body = json_pack("{s:s,s:s,s:s,s:b}", "command", cmd, "gpu", a.shape,
	                 "priority", a.priority, "preemptible", a.preemptible);
	if (a.deadline[0])
		json_object_set_new(body, "deadline", json_string(a.deadline));
	if (a.runtime_s)
		json_object_set_new(body, "runtime_s",
		                    json_integer((json_int_t)a.runtime_s));
	if (a.cpu_milli)
		json_object_set_new(body, "cpu_milli",
		                    json_integer((json_int_t)a.cpu_milli));
	if (a.mem_mib)
		json_object_set_new(body, "mem_mib",
		                    json_integer((json_int_t)a.mem_mib));
	if (a.dataset[0])
		json_object_set_new(body, "dataset", json_string(a.dataset));
	json_decref(p->where);
	p->where = where; /* what renodes() compares with */
	if (where)
		json_object_update(body, where);
	/* Its preferences as they are now: not compared by renodes(), so
	 * that pods placed meanwhile do not send it to the back again. */
	if (prefs)
		json_object_update(body, prefs);
	json_decref(prefs);
	if (a.gpu_types[0]) {
		json_t *types = json_array();
		char *save = NULL, list[sizeof(a.gpu_types)];
		snprintf(list, sizeof(list), "%s", a.gpu_types);
		for (char *t = strtok_r(list, ",", &save); t;
		     t = strtok_r(NULL, ",", &save))
			json_array_append_new(types, json_string(t));
		json_object_set_new(body, "gpu_types", types);
	}
	{
		char *pe = cnl_client_url_escape(project);
		snprintf(path, sizeof(path), "/v1/projects/%s/jobs", pe);
		free(pe);
	}
	/* The same key after a restart finds the same job again. */
	if (p->attempt)
		snprintf(key, sizeof(key), "kube-pod-%s-%d", p->uid,
		         p->attempt);
	else
		snprintf(key, sizeof(key), "kube-pod-%s", p->uid);
	struct cnl_client_reply rep;
	r = cnl_client_send(ks->user, "POST", path, body, key, &rep);
	json_decref(body);
	if (r < 0 || rep.status >= 500 || rep.status == 429) {
		cnl_log(CNL_LOG_WARN, "kube: cannot submit a pod", "pod=%s/%s",
		        p->ns, p->name);
		cnl_client_reply_done(&rep);
		return;
	}
	reply = rep.json ? json_incref(rep.json) : NULL;
	if (rep.status == 201 &&
	    S(json_object_get(p->obj, "spec"), "nodeName")) {
		/* Bound already, and not by this control plane (its key
		 * found no job): running where it is, which CNLab cannot
		 * move; the new job goes, the pod is left alone. */
		id = S(reply, "id");
		cancel_job(ks, id ? id : "-");
		cnl_log(CNL_LOG_WARN,
		        "kube: a pod bound by no job of ours is left alone",
		        "pod=%s/%s node=%s", p->ns, p->name,
		        S(json_object_get(p->obj, "spec"), "nodeName"));
		p->st = P_DONE;
		json_decref(reply);
		cnl_client_reply_done(&rep);
		return;
	}
	if (rep.status == 200 || rep.status == 201) {
		id = S(reply, "id");
		if (id && strlen(id) < sizeof(p->job)) {
			track_job(ks, p, id);
			p->st = P_SUBMITTED;
			say(ks, p, "Unschedulable",
			    "cnlab: waiting as job %s of project %s (%s)", id,
			    pname, a.shape);
			tj_news(ks, p, "Pending", "", -256, p->said);
		}
		json_decref(reply);
		cnl_client_reply_done(&rep);
		return;
	}
	snprintf(err, sizeof(err), "project %s: %s", pname,
	         S(json_object_get(reply, "error"), "message")
	             ?: (rep.status == 404 ? "no such project, or the service "
	                                     "user kube is not its member"
	                                   : "refused"));
	json_decref(reply);
	cnl_client_reply_done(&rep);
refuse:
	p->st = P_REFUSED;
	p->retry_at = now + REFUSE_RETRY_MS;
	say(ks, p, "Unschedulable", "cnlab: %s", err);
	tj_news(ks, p, "Pending", "", -256, p->said);
	cnl_log(CNL_LOG_INFO, "kube: pod refused", "pod=%s/%s why=\"%s\"",
	        p->ns, p->name, err);
}

/* A report to CNLab of @p's job on its node. */
/* A node's report of @p's job (@url: a server's, "http://ADDRESS:PORT/
 * ?token=T", where cnlabd's proxy reaches it). */
static void report_url(struct cnl_kube_sched *ks, struct pod *p,
                       enum cnl_wire_report_state state, int code,
                       const char *msg, const char *url)
{
	struct cnl_wire_report m = {0};
	struct node *n = &ks->nodes[p->node];
	char path[256], err[256];
	json_t *body;

	snprintf(m.id, sizeof(m.id), "%s", p->job);
	snprintf(m.url, sizeof(m.url), "%s", url ? url : "");
	m.epoch = p->epoch;
	m.state = state;
	if (state == CNL_WIRE_REPORT_SUCCEEDED ||
	    state == CNL_WIRE_REPORT_FAILED) {
		m.has_exit_code = true;
		m.exit_code = code;
	}
	snprintf(m.message, sizeof(m.message), "%s", msg ? msg : "");
	body = cnl_wire_report_encode(&m);
	snprintf(path, sizeof(path), "/v1/nodes/%s/reports", n->id);
	ks->as = n->cred;
	long st = cnl_client_call(ks->nodecl, "POST", path, body, 0, NULL, err,
	                          sizeof(err));
	if (url)
		cnl_json_wipe(body);
	json_decref(body);
	if (st != 200 && st != 201)
		cnl_log(CNL_LOG_WARN, "kube: a report was not taken",
		        "job=%s state=%s err=\"%s\"", p->job,
		        cnl_wire_report_state_name(state), err);
	explicit_bzero(&m, sizeof(m));
}

static void report(struct cnl_kube_sched *ks, struct pod *p,
                   enum cnl_wire_report_state state, int code, const char *msg)
{
	report_url(ks, p, state, code, msg, NULL);
}

static bool pod_ended(const struct pod *p, int *code)
{
	const json_t *st = json_object_get(p->obj, "status");
	const char *phase = S(st, "phase");
	const char *first =
	    S(json_array_get(json_object_get(json_object_get(p->obj, "spec"),
	                                     "containers"),
	                     0),
	      "name");
	const json_t *cs = NULL, *x;
	size_t i;

	/* Its first container's, in the spec's order (the statuses may
	 * come in another). */
	json_array_foreach (json_object_get(st, "containerStatuses"), i, x)
		if (!cs ||
		    (first && S(x, "name") && strcmp(S(x, "name"), first) == 0))
			cs = x;
	const json_t *t =
	    json_object_get(json_object_get(cs, "state"), "terminated");

	*code = t ? (int)json_integer_value(json_object_get(t, "exitCode")) : 0;
	if (*code < -255 || *code > 255)
		*code = 255;
	if (phase && strcmp(phase, "Succeeded") == 0)
		return true;
	if (phase && strcmp(phase, "Failed") == 0) {
		if (!*code)
			*code = 1;
		return true;
	}
	return false;
}

/* Server pod @p's entry for the execs (server_exec) goes with it. */
static void srv_pod_drop(struct cnl_kube_sched *ks, const struct pod *p)
{
	const json_t *at;

	if (!p->server || !p->job[0])
		return;
	pthread_mutex_lock(&ks->exec_mu);
	at = json_object_get(ks->srv_pods, p->job);
	if (at && S(at, "uid") && strcmp(S(at, "uid"), p->uid) == 0)
		json_object_del(ks->srv_pods, p->job);
	pthread_mutex_unlock(&ks->exec_mu);
}

static void forget(struct cnl_kube_sched *ks, struct pod *p)
{
	srv_pod_drop(ks, p);
	json_decref(p->claim_obj);
	p->claim_obj = NULL;
	json_decref(p->where);
	p->where = NULL;
	if (p->job[0])
		json_object_del(ks->by_job, p->job);
	p->st = P_DONE;
}

static void run_delete(struct cnl_kube_sched *ks, struct pod *p,
                       int64_t grace_s);
static void run_log(struct cnl_kube_sched *ks, struct pod *p, int64_t now);
/* Evict @p (its job was cancelled or pre-empted). */
static void evict(struct cnl_kube_sched *ks, struct pod *p, int64_t now,
                  int64_t grace_s)
{
	/* 0 would be a forced deletion: the kubelet not asked first. */
	if (grace_s < 1)
		grace_s = 1;
	char path[512], err[256];
	json_t *body = json_pack(
	    "{s:s,s:s,s:{s:s,s:s},s:{s:I}}", "apiVersion", "policy/v1", "kind",
	    "Eviction", "metadata", "name", p->name, "namespace", p->ns,
	    "deleteOptions", "gracePeriodSeconds", (json_int_t)grace_s);

	if (p->run) { /* our own pod: deleted, no budget of theirs */
		json_decref(body);
		run_delete(ks, p, grace_s);
		p->evicting = true;
		p->evict_at = now + EVICT_RETRY_MS;
		return;
	}
	pod_path(p, "eviction", path, sizeof(path));
	/* Its own client, without retries: a budget's 429 is an answer,
	 * not a fault, and the worker must not wait on it. */
	long st = cnl_kube_call(ks->ke, "POST", path, body, NULL, NULL, err,
	                        sizeof(err));
	json_decref(body);
	p->evicting = true;
	p->evict_at = now + EVICT_RETRY_MS;
	if (st == 200 || st == 201)
		cnl_log(CNL_LOG_INFO, "kube: pod evicted", "pod=%s/%s job=%s",
		        p->ns, p->name, p->job);
	else if (st == 429)
		cnl_log(CNL_LOG_INFO,
		        "kube: eviction refused (a PodDisruptionBudget); "
		        "trying again",
		        "pod=%s/%s err=\"%s\"", p->ns, p->name, err);
	else if (st == 404)
		p->gone = true;
	else
		cnl_log(CNL_LOG_WARN, "kube: eviction failed",
		        "pod=%s/%s err=\"%s\"", p->ns, p->name, err);
}

/* Pod @p of a TrainingJob (or NotebookServer) was evicted by CNLab and is
 * going: its stop is reported; if its job was pre-empted (CNLab requeued
 * it), the resource gets a new pod and claim that take the same job: 1.
 * 0: it was not pre-empted (it ended: cancelled, as it was).  -1: not
 * known yet (the report or the job's state did not come): asked again. */
static int cr_requeue(struct cnl_kube_sched *ks, struct pod *p, json_t *t)
{
	char path[512], err[256];
	json_t *o = NULL;
	long st;

	report(ks, p, CNL_WIRE_REPORT_STOPPED, 0, "evicted");
	snprintf(path, sizeof(path), "/v1/jobs/%s", p->job);
	st = cnl_client_call(ks->user, "GET", path, NULL, 0, &o, err,
	                     sizeof(err));
	const char *state = st == 200 ? S(o, "state") : NULL;
	int known = !state                          ? -1
	            : strcmp(state, "pending") == 0 ? 1
	            : strcmp(state, "succeeded") == 0 ||
	                    strcmp(state, "failed") == 0 ||
	                    strcmp(state, "cancelled") == 0
	                ? 0
	                : -1; /* still leaving its node */
	json_decref(o);
	if (known <= 0)
		return known;
	/* Its claim goes too (it is reserved for the pod that went); the
	 * operator makes both again. */
	if (p->claim[0]) {
		claim_url(p, NULL, path, sizeof(path));
		st = cnl_kube_call(ks->kc, "DELETE", path, NULL, NULL, NULL,
		                   err, sizeof(err));
		if (st != 200 && st != 202 && st != 404)
			cnl_log(CNL_LOG_WARN, "kube: cannot delete a claim",
			        "claim=%s/%s err=\"%s\"", p->ns, p->claim, err);
	}
	json_object_set_new(t, "job", json_string(p->job));
	json_object_set_new(t, "made", json_false());
	json_object_set_new(t, "remake", json_true());
	tj_news(ks, p, "Pending", "", -256,
	        "pre-empted: waits again, in a new pod");
	cnl_log(CNL_LOG_INFO, "kube: a pre-empted pod is made again",
	        "pod=%s/%s job=%s", p->ns, p->name, p->job);
	return 1;
}

/* Whether CNLab job @id waits for the new pod of a pre-empted
 * TrainingJob (cr_requeue): its assignment is not for the old pod. */
static bool cr_waits(struct cnl_kube_sched *ks, const char *id)
{
	const char *key;
	json_t *t;

	json_object_foreach (ks->crs, key, t)
		if (S(t, "job") && strcmp(S(t, "job"), id) == 0)
			return true;
	return false;
}

/* Why @p's container cannot start (an image that cannot be pulled, a
 * configuration that cannot be made), into @why; false when it is not
 * stuck so. */
static bool run_stuck(const struct pod *p, char *why, size_t len)
{
	static const char *const bad[] = {
	    "ErrImagePull",         "ImagePullBackOff",
	    "InvalidImageName",     "CreateContainerConfigError",
	    "CreateContainerError", "RunContainerError",
	    "ErrImageNeverPull",    NULL};
	static const char *const lists[] = {"initContainerStatuses",
	                                    "containerStatuses"};
	const json_t *st = json_object_get(p->obj, "status");

	/* The init containers' (a run pod's inputs, its collector) first:
	 * while one cannot start, the job's container only waits
	 * (PodInitializing). */
	for (size_t l = 0; l < 2; l++) {
		const json_t *cs;
		size_t i;
		json_array_foreach (json_object_get(st, lists[l]), i, cs) {
			const json_t *w = json_object_get(
			    json_object_get(cs, "state"), "waiting");
			const char *r = S(w, "reason");
			for (const char *const *b = bad; r && *b; b++)
				if (strcmp(r, *b) == 0) {
					snprintf(why, len, "%s: %s", r,
					         S(w, "message") ?: "");
					return true;
				}
		}
	}
	return false;
}

/* Whether run pod @p is still there, as the API server has it now (not
 * deleted, nor being deleted, nor another pod of its name). */
static bool run_pod_live(struct cnl_kube_sched *ks, const struct pod *p)
{
	char path[512], err[256];
	json_t *o = NULL;
	bool live;

	pod_path(p, NULL, path, sizeof(path));
	live = cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
	                     sizeof(err)) == 200;
	const json_t *md = json_object_get(o, "metadata");
	live = live && S(md, "uid") && strcmp(S(md, "uid"), p->uid) == 0 &&
	       !json_object_get(md, "deletionTimestamp");
	json_decref(o);
	return live;
}

/* Whether a ConfigMap of run pod @p's inputs is gone while the pod has
 * not mounted it yet (its init container has not started): the kubelet
 * would wait for it for ever, the job's slice held.  Its name into @why.
 * -EIO when the API server does not answer. */
static int run_inputs_gone(struct cnl_kube_sched *ks, const struct pod *p,
                           char *why, size_t len)
{
	const json_t *st = json_object_get(p->obj, "status");
	const json_t *ic =
	    json_array_get(json_object_get(st, "initContainerStatuses"), 0);
	const json_t *state = json_object_get(ic, "state");
	const json_t *v;
	size_t i;

	if (!S(st, "phase") || strcmp(S(st, "phase"), "Pending") != 0 ||
	    json_object_get(state, "running") ||
	    json_object_get(state, "terminated"))
		return 0;
	json_array_foreach (
	    json_object_get(json_object_get(p->obj, "spec"), "volumes"), i, v) {
		const json_t *src, *x;
		size_t k;
		if (!S(v, "name") || strcmp(S(v, "name"), "inputs") != 0)
			continue;
		src =
		    json_object_get(json_object_get(v, "projected"), "sources");
		json_array_foreach (src, k, x) {
			const char *cm =
			    S(json_object_get(x, "configMap"), "name");
			char path[512], err[256];
			if (!cm)
				continue;
			snprintf(path, sizeof(path),
			         "/api/v1/namespaces/%s/configmaps/%s", p->ns,
			         cm);
			long code = cnl_kube_call(ks->kc, "GET", path, NULL,
			                          NULL, NULL, err, sizeof(err));
			if (code == 404) {
				snprintf(
				    why, len,
				    "its inputs' ConfigMap %s is gone: the "
				    "pod cannot start",
				    cm);
				return 1;
			}
			if (code != 200) {
				cnl_log(CNL_LOG_WARN,
				        "kube: cannot read a run pod's inputs' "
				        "ConfigMap",
				        "configmap=%s/%s status=%ld err=\"%s\"",
				        p->ns, cm, code, err);
				return -EIO;
			}
		}
	}
	return 0;
}

/* Whether run pod @p failed in its init container (its inputs did not
 * check), and its message (the end of its log, as the kubelet keeps it)
 * into @why. */
static bool run_inputs_failed(const struct pod *p, char *why, size_t len)
{
	const json_t *st = json_object_get(p->obj, "status");
	const json_t *x;
	size_t i;

	json_array_foreach (json_object_get(st, "initContainerStatuses"), i,
	                    x) {
		const json_t *t =
		    json_object_get(json_object_get(x, "state"), "terminated");
		if (!t || !S(x, "name") ||
		    strcmp(S(x, "name"), "inputs") != 0 ||
		    json_integer_value(json_object_get(t, "exitCode")) == 0)
			continue;
		const char *m = S(t, "message");
		size_t n = m ? strlen(m) : 0;
		while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
			n--;
		if (n)
			snprintf(why, len,
			         "its inputs did not reach the pod: %.*s",
			         (int)n, m);
		else /* killed (OOMKilled...) before it wrote a word */
			snprintf(
			    why, len,
			    "its inputs did not reach the pod: its init "
			    "container ended (%s, exit code "
			    "%" JSON_INTEGER_FORMAT ")",
			    S(t, "reason") ?: "no reason given",
			    json_integer_value(json_object_get(t, "exitCode")));
		return true;
	}
	return false;
}

/* Whether run pod @p's collector failed to bring back its artifacts (a
 * file it could not collect, a refusal, a kill before it was done): its
 * termination message, or how it ended, into @why. */
static bool run_collect_failed(const struct pod *p, char *why, size_t len)
{
	const json_t *st = json_object_get(p->obj, "status");
	const json_t *x;
	size_t i;

	if (!p->collect_image[0])
		return false;
	json_array_foreach (json_object_get(st, "initContainerStatuses"), i,
	                    x) {
		const json_t *t =
		    json_object_get(json_object_get(x, "state"), "terminated");
		if (!S(x, "name") || strcmp(S(x, "name"), "collect") != 0)
			continue;
		if (!t) {
			snprintf(why, len,
			         "its artifacts were not collected: its "
			         "collector did not end");
			return true;
		}
		if (json_integer_value(json_object_get(t, "exitCode")) == 0)
			return false;
		const char *m = S(t, "message");
		size_t n = m ? strlen(m) : 0;
		while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
			n--;
		if (n)
			snprintf(why, len, "%.*s", (int)n, m);
		else /* killed (the grace period over, OOMKilled...) */
			snprintf(
			    why, len,
			    "its artifacts were not all collected: its "
			    "collector ended (%s, exit code "
			    "%" JSON_INTEGER_FORMAT ")",
			    S(t, "reason") ?: "no reason given",
			    json_integer_value(json_object_get(t, "exitCode")));
		return true;
	}
	snprintf(why, len,
	         "its artifacts were not collected: its collector never "
	         "ran");
	return true;
}

static void server_token(const struct cnl_kube_sched *ks, const char *id,
                         int64_t epoch, char out[33]);

/* Server pod @p, once the kubelet runs it with an address: its job
 * running, with the URL where cnlabd's proxy reaches it. */
static void server_running(struct cnl_kube_sched *ks, struct pod *p)
{
	const json_t *st = json_object_get(p->obj, "status");
	const char *ip = S(st, "podIP"), *phase = S(st, "phase");
	char token[33], url[CNL_WIRE_URL_MAX];

	if (!ip || !phase || strcmp(phase, "Running") != 0 ||
	    strspn(ip, "0123456789abcdefABCDEF.:") != strlen(ip))
		return;
	server_token(ks, p->job, p->epoch, token);
	snprintf(url, sizeof(url), "http://%s%s%s:%d/?token=%s",
	         strchr(ip, ':') ? "[" : "", ip, strchr(ip, ':') ? "]" : "",
	         CNL_KUBE_SERVER_PORT, token);
	/* The pod an exec goes to (server_exec), known before its RUNNING
	 * is. */
	pthread_mutex_lock(&ks->exec_mu);
	json_object_set_new(ks->srv_pods, p->job,
	                    json_pack("{s:s,s:s,s:s,s:I,s:s,s:s}", "ns", p->ns,
	                              "name", p->name, "uid", p->uid, "epoch",
	                              (json_int_t)p->epoch, "image", p->image,
	                              "collect_image", p->collect_image));
	pthread_mutex_unlock(&ks->exec_mu);
	report_url(ks, p, CNL_WIRE_REPORT_RUNNING, 0, NULL, url);
	explicit_bzero(token, sizeof(token));
	explicit_bzero(url, sizeof(url));
	p->url_said = true;
}

static void step_pod(struct cnl_kube_sched *ks, struct pod *p, int64_t now)
{
	if (p->run && p->check_gone) {
		char path[512], err[256];
		json_t *o = NULL;
		pod_path(p, NULL, path, sizeof(path));
		long st = cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o,
		                        err, sizeof(err));
		const char *u = S(json_object_get(o, "metadata"), "uid");
		if (st == 404 || (st == 200 && (!u || strcmp(u, p->uid) != 0)))
			p->gone = true;
		if (st == 404 || st == 200)
			p->check_gone = false;
		json_decref(o);
	}
	const json_t *md = json_object_get(p->obj, "metadata");
	bool deleting = p->gone || json_object_get(md, "deletionTimestamp");
	const char *bound = S(json_object_get(p->obj, "spec"), "nodeName");
	int code;
	bool ended = pod_ended(p, &code);

	switch (p->st) {
	case P_NEW:
	case P_REFUSED:
		if (deleting || ended) {
			forget(ks, p);
			return;
		}
		/* A run job's pod (or one labelled as one): it waits for its
		 * job's assignment (run_pod), and is never a job of its own. */
		if (S(json_object_get(md, "labels"), "cnlab.io/job"))
			return;
		/* Bound by an earlier run of ours: its job (the same
		 * Idempotency-Key) is found again and placed where it is. */
		if (now >= p->retry_at)
			submit(ks, p, now);
		return;
	case P_SUBMITTED:
		if (deleting || ended) {
			cancel_job(ks, p->job);
			tj_news(ks, p, "Cancelled", "", -256,
			        "its pod went before it was placed");
			forget(ks, p);
		}
		(void)bound;
		return;
	case P_BOUND:
		/* Evicted or deleted: the kubelet may mark it Failed on its
		 * way out; it ends as it was ended, cancelled. */
		if (ended && !p->evicting && !deleting) {
			char why[CNL_WIRE_MESSAGE_MAX];
			bool init_failed =
			    p->run && run_inputs_failed(p, why, sizeof(why));
			/* Ended before the worker looked: what ran was not
			 * what its job asked, whatever it answered. */
			if (p->run && run_tampered(p)) {
				snprintf(why, sizeof(why), "%s", TAMPERED);
				init_failed = true;
				code = code ? code : 1;
			}
			if (p->run && !init_failed) /* its output first */
				run_log(ks, p, -1);
			/* Its artifacts, as its agent would: the job as a
			 * whole did not succeed without them. */
			if (p->run && !init_failed &&
			    run_collect_failed(p, why, sizeof(why))) {
				init_failed = true;
				code = code ? code : 1;
			}
			report(ks, p,
			       code ? CNL_WIRE_REPORT_FAILED
			            : CNL_WIRE_REPORT_SUCCEEDED,
			       code, init_failed ? why : NULL);
			if (p->run) /* its claim and inputs go with it */
				run_delete(ks, p, 0);
			tj_news(ks, p, code ? "Failed" : "Succeeded",
			        ks->nodes[p->node].name, code, NULL);
			forget(ks, p);
		} else if (p->run
		               ? p->gone || (ended && (deleting || p->evicting))
		               : p->gone ||
		                     ((ended || deleting) && p->evicting) ||
		                     (ended && deleting)) {
			/* (A run pod's stop is told once its container is
			 * done: until then it holds its GPU.) */
			/* Cancelled first, then stopped: the job ends
			 * cancelled, as its pod did (deleted, or evicted: a
			 * pre-empted job would wait again, and its pod is gone;
			 * its controller makes a new one, a new job). */
			/* A run job stopped by CNLab: CNLab knows why (a
			 * pre-empted one waits again, in a new pod); so
			 * does a TrainingJob's. */
			json_t *cr = p->evicting && !p->run
			                 ? cr_entry(ks, p, NULL, NULL)
			                 : NULL;
			int rq = cr ? cr_requeue(ks, p, cr) : 0;
			if (rq < 0) /* asked again next round */
				return;
			if (rq > 0) {
				forget(ks, p);
				return;
			}
			if (!p->run || !p->evicting)
				cancel_job(ks, p->job);
			if (!cr) /* else reported by cr_requeue() */
				report(ks, p, CNL_WIRE_REPORT_STOPPED, 0,
				       p->evicting
				           ? (p->run ? "stopped" : "evicted")
				           : "pod deleted");
			tj_news(ks, p, "Cancelled", ks->nodes[p->node].name,
			        -256, p->evicting ? "evicted" : "pod deleted");
			forget(ks, p);
		} else if (p->evicting && now >= p->evict_at) {
			evict(ks, p, now, 30);
		} else if (p->run && run_tampered(p)) {
			/* Someone who may patch pods swapped its image: it no
			 * longer runs what its job asked. */
			report(ks, p, CNL_WIRE_REPORT_FAILED, 1, TAMPERED);
			run_delete(ks, p, 1);
			forget(ks, p);
		} else if (p->run && now >= p->log_at) {
			char why[CNL_WIRE_MESSAGE_MAX - 64];
			if (p->server && !p->url_said)
				server_running(ks, p);
			run_log(ks, p, now);
			/* Its inputs' ConfigMaps, once a start timeout: one
			 * deleted before the kubelet mounted it (by whoever may
			 * delete ConfigMaps there) would hold the pod, and its
			 * slice, for ever.  It fails the job now. */
			/* (Not for a pod on its way out: the garbage
			 * collector takes its ConfigMaps with it.) */
			if (!p->maps_at)
				p->maps_at = now + ks->start_timeout;
			if (now >= p->maps_at && !p->evicting && !deleting) {
				char gone[CNL_WIRE_MESSAGE_MAX];
				p->maps_at = now + ks->start_timeout;
				if (run_inputs_gone(ks, p, gone, sizeof(gone)) >
				        0 &&
				    run_pod_live(ks, p)) {
					report(ks, p, CNL_WIRE_REPORT_FAILED, 1,
					       gone);
					run_delete(ks, p, 1);
					forget(ks, p);
					return;
				}
			}
			if (!run_stuck(p, why, sizeof(why))) {
				p->stuck_since = 0;
			} else if (!p->stuck_since) {
				p->stuck_since = now;
			} else if (now - p->stuck_since >= ks->start_timeout) {
				/* It would hold its GPU slice for ever. */
				char msg[CNL_WIRE_MESSAGE_MAX];
				snprintf(msg, sizeof(msg),
				         "its pod cannot start: %s", why);
				report(ks, p, CNL_WIRE_REPORT_FAILED, 1, msg);
				run_delete(ks, p, 1);
				forget(ks, p);
			}
		}
		return;
	case P_DONE:
		return;
	}
}

/* ---- binding ------------------------------------------------------------- */

/* Give @p's claim the slice of @a on node @n: 0, or -EBUSY (it holds
 * another allocation, or a conflict twice), -EIO. */
static int allocate(struct cnl_kube_sched *ks, struct pod *p,
                    const struct node *n, const struct cnl_wire_assignment *a)
{
	char path[512], err[256];
	unsigned char share[CNL_WIRE_GPUS_MAX][16];

	if (!p->claim[0])
		return 0;
	for (int tries = 0; tries < 3; tries++) {
		json_t *c = NULL, *alloc;
		long st;

		claim_url(p, NULL, path, sizeof(path));
		if (p->claim_obj) { /* read at its submission: try that */
			c = p->claim_obj;
			p->claim_obj = NULL;
		} else if ((st = cnl_kube_call(ks->kc, "GET", path, NULL, NULL,
		                               &c, err, sizeof(err))) != 200) {
			json_decref(c);
			return st == 404 ? -EBUSY : -EIO;
		}
		/* A run pod's claim is the one cnlabd made for it, owned
		 * by it; one of that name made by someone else is not
		 * given this job's slice. */
		const json_t *ref0 = json_array_get(
		    json_object_get(json_object_get(c, "metadata"),
		                    "ownerReferences"),
		    0);
		if (p->run && (!ref0 || !S(ref0, "uid") ||
		               strcmp(S(ref0, "uid"), p->uid) != 0)) {
			json_decref(c);
			return -EBUSY;
		}
		const json_t *old =
		    json_object_get(json_object_get(c, "status"), "allocation");
		if (old) {
			/* Ours already (an earlier try whose reply was lost)?
			 */
			const json_t *rf = json_array_get(
			    json_object_get(json_object_get(c, "status"),
			                    "reservedFor"),
			    0);
			const json_t *r0 = json_array_get(
			    json_object_get(json_object_get(old, "devices"),
			                    "results"),
			    0);
			bool mine = rf && S(rf, "uid") &&
			            strcmp(S(rf, "uid"), p->uid) == 0 && r0 &&
			            S(r0, "pool") &&
			            strcmp(S(r0, "pool"), n->name) == 0;
			json_decref(c);
			return mine ? 0 : -EBUSY;
		}
		if (getrandom(share, sizeof(share), 0) !=
		    (ssize_t)sizeof(share)) {
			json_decref(c);
			return -EIO;
		}
		alloc = cnl_kube_allocation(&a->gpu, n->name, p->request,
		                            p->name, p->uid, share);
		json_object_set_new(c, "status", alloc);
		claim_url(p, "status", path, sizeof(path));
		st = cnl_kube_call(ks->kc, "PUT", path, c, NULL, NULL, err,
		                   sizeof(err));
		json_decref(c);
		if (st == 200 || st == 201)
			return 0;
		if (st != 409) {
			cnl_log(CNL_LOG_WARN, "kube: cannot allocate a claim",
			        "pod=%s/%s err=\"%s\"", p->ns, p->name, err);
			/* A refusal (403, 422...) will not change by itself;
			 * no answer, or the server's fault, may. */
			return st >= 400 && st < 500 && st != 429 ? -EBUSY
			                                          : -EIO;
		}
	}
	return -EBUSY;
}

static int bind_pod(struct cnl_kube_sched *ks, struct pod *p,
                    const struct node *n)
{
	char path[512], err[256];
	json_t *b = json_pack(
	    "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s}}", "apiVersion", "v1", "kind",
	    "Binding", "metadata", "name", p->name, "uid", p->uid, "target",
	    "apiVersion", "v1", "kind", "Node", "name", n->name);
	long st;

	pod_path(p, "binding", path, sizeof(path));
	st = cnl_kube_call(ks->kc, "POST", path, b, NULL, NULL, err,
	                   sizeof(err));
	json_decref(b);
	json_decref(ks->placed); /* one more pod on a node */
	ks->placed = NULL;
	if (st == 200 || st == 201)
		return 0;
	if (st == 409) { /* bound already: where? */
		json_t *o = NULL;
		pod_path(p, NULL, path, sizeof(path));
		if (cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
		                  sizeof(err)) == 200) {
			const char *nn =
			    S(json_object_get(o, "spec"), "nodeName");
			bool same = nn && strcmp(nn, n->name) == 0;
			json_decref(o);
			if (same)
				return 0;
		} else {
			json_decref(o);
		}
		return -EBUSY;
	}
	if (st == 404)
		p->gone = true;
	cnl_log(CNL_LOG_WARN, "kube: cannot bind a pod", "pod=%s/%s err=\"%s\"",
	        p->ns, p->name, err);
	/* A refusal (a pod with scheduling gates: 422) is final. */
	return st >= 400 && st < 500 && st != 429 ? -EBUSY : -EIO;
}

/* The pod "NS/NAME" if it is known and not gone (one whose job is not
 * ended first: a name may come back as a new pod), else NULL. */
static struct pod *pod_named(struct cnl_kube_sched *ks, const char *nsname)
{
	struct pod *done = NULL;

	for (size_t i = 0; i < ks->n_pods; i++) {
		struct pod *p = &ks->pods[i];
		size_t l = strlen(p->ns);
		if (p->gone || strncmp(nsname, p->ns, l) != 0 ||
		    nsname[l] != '/' || strcmp(nsname + l + 1, p->name) != 0)
			continue;
		if (p->st != P_DONE)
			return p;
		done = p;
	}
	return done;
}

/* ---- `cnlab run` jobs as pods ---------------------------------------------
 */

/* A ConfigMap holds 1 MiB; its inputs' bytes travel as base64 in it, so
 * 700 KiB of them in each of at most RUN_INPUT_MAPS.  Each input's path
 * and SHA-256 are arguments of the pod's init container: RUN_INPUTS_MAX
 * keeps the pod spec small. */
#define RUN_INPUTS_MAX   256
#define RUN_MAP_BYTES    (700 * 1024)
#define RUN_INPUT_MAPS   8
#define RUN_LOG_MS       250 /* a running pod's log read as often */
#define RUN_LOG_READ     ((size_t)4 << 20)  /* bytes of log read at once */
#define RUN_LOG_READ_MAX ((size_t)32 << 20) /* ... at most */

/* The namespace where project @id's run jobs become pods, into @ns, and
 * the project's name into @pname: the namespace labelled
 * cnlab.io/project=NAME (none when several are), else the namespace named
 * NAME if no label gives it to another project.  0, -ENOENT with why in
 * @err, -EIO (try again). */
static int run_namespace(struct cnl_kube_sched *ks, const char *id, char *ns,
                         size_t nslen, char *pname, size_t plen, char *err,
                         size_t errlen)
{
	json_t *have = json_object_get(ks->run_ns, id), *o = NULL, *x;
	char path[512];
	const char *name, *best = NULL;
	long st;
	size_t i;

	if (have) {
		snprintf(ns, nslen, "%s",
		         json_string_value(json_array_get(have, 0)));
		snprintf(pname, plen, "%s",
		         json_string_value(json_array_get(have, 1)));
		return 0;
	}
	snprintf(path, sizeof(path), "/v1/projects/%s", id);
	st = cnl_client_call(ks->user, "GET", path, NULL, 0, &o, err, errlen);
	if (st != 200 || !(name = S(o, "name"))) {
		json_decref(o);
		if (st < 0 || st >= 500)
			return -EIO;
		cnl_seterr(err, errlen,
		           "project %s has not admitted the service user kube "
		           "(cnlab project member add PROJECT kube)",
		           id);
		return -ENOENT;
	}
	snprintf(pname, plen, "%s", name);
	json_decref(o);
	o = NULL;
	{
		char *e = cnl_client_url_escape(pname);
		snprintf(path, sizeof(path),
		         "/api/v1/"
		         "namespaces?labelSelector=cnlab.io%%2Fproject%%3D%s",
		         e);
		free(e);
	}
	if ((st = cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
	                        errlen)) != 200) {
		json_decref(o);
		if (st == 400) /* "a.", "b_": names no label may carry */
			cnl_seterr(
			    err, errlen,
			    "project %s: its name is no Kubernetes label "
			    "value, so no namespace can be its",
			    pname);
		return st == 403 || st == 400 ? -ENOENT : -EIO;
	}
	int matches = 0;
	json_array_foreach (json_object_get(o, "items"), i, x) {
		const char *n = S(json_object_get(x, "metadata"), "name");
		const char *p = cnl_kube_project_of(x);
		/* The label is the selector's; a server's slip is not
		 * taken on trust. */
		if (!n || !p || strcmp(p, pname) != 0)
			continue;
		/* Two namespaces saying they are one project's: which one
		 * gets its pods (its inputs, its output) is no guess. */
		if (matches++) {
			cnl_seterr(err, errlen,
			           "namespaces %s and %s both say they are "
			           "project %s's (label cnlab.io/project): "
			           "leave the label on one",
			           best, n, pname);
			json_decref(o);
			return -ENOENT;
		}
		best = n;
	}
	if (best)
		snprintf(ns, nslen, "%s", best);
	json_decref(o);
	o = NULL;
	if (!best) {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s", pname);
		st = cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
		                   errlen);
		const char *p = st == 200 ? cnl_kube_project_of(o) : NULL;
		bool mine = p && strcmp(p, pname) == 0;
		if (mine)
			snprintf(ns, nslen, "%s", pname);
		json_decref(o); /* (p pointed into it) */
		if (!mine) {
			if (st != 200 && st != 404 && st != 403)
				return -EIO;
			cnl_seterr(err, errlen,
			           "no namespace is project %s's: label one "
			           "cnlab.io/project=%s (kubectl label "
			           "namespace NS cnlab.io/project=%s)",
			           pname, pname, pname);
			return -ENOENT;
		}
	}
	json_object_set_new(ks->run_ns, id, json_pack("[s,s]", ns, pname));
	return 0;
}

/* The proof that cnlabd made pod @uid (@ns/@name) for run @job @epoch:
 * HMAC-SHA256 under a key from cnlabd's secret, in hex.  The pod carries
 * it in its annotation cnlab.io/run-proof, written once the API server
 * gave the pod its uid: a pod made by someone else under that name has
 * another uid, so a copied proof does not fit it.  "" without a key. */
#define PROOF_ANN "cnlab.io/run-proof"
static void run_proof(const struct cnl_kube_sched *ks, const char *uid,
                      const char *job, int64_t epoch, const char *ns,
                      const char *name, char hex[65])
{
	char msg[1024];
	unsigned char mac[32];
	unsigned int n = 0;
	int len = snprintf(msg, sizeof(msg), "%s\n%s\n%" PRId64 "\n%s\n%s", uid,
	                   job, epoch, ns, name);

	hex[0] = '\0';
	if (!ks->has_proof_key || len < 0 || (size_t)len >= sizeof(msg) ||
	    !HMAC(EVP_sha256(), ks->proof_key, sizeof(ks->proof_key),
	          (const unsigned char *)msg, (size_t)len, mac, &n) ||
	    n != sizeof(mac))
		return;
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
}

/* The access token of server @id's pod under @epoch (hex, 32 digits):
 * derived, so that a restarted cnlabd (or another replica) knows it
 * again; it is in the pod's Secret NAME-server, never in its spec. */
static void server_token(const struct cnl_kube_sched *ks, const char *id,
                         int64_t epoch, char out[33])
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	char msg[256];
	int len =
	    snprintf(msg, sizeof(msg), "server token\n%s\n%" PRId64, id, epoch);

	out[0] = '\0';
	if (!ks->has_proof_key || len < 0 || (size_t)len >= sizeof(msg) ||
	    !HMAC(EVP_sha256(), ks->proof_key, sizeof(ks->proof_key),
	          (const unsigned char *)msg, (size_t)len, mac, &n) ||
	    n < 16)
		return;
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	explicit_bzero(mac, sizeof(mac));
}

/* Whether pod @q carries the proof that cnlabd made it for @job @epoch. */
static bool run_proven(const struct cnl_kube_sched *ks, const struct pod *q,
                       const char *job, int64_t epoch)
{
	char want[65];
	const char *have = S(
	    json_object_get(json_object_get(q->obj, "metadata"), "annotations"),
	    PROOF_ANN);

	run_proof(ks, q->uid, job, epoch, q->ns, q->name, want);
	return want[0] && have && strlen(have) == 64 &&
	       CRYPTO_memcmp(want, have, 64) == 0;
}

/*
 * The API's check of a collector's pod token (cnl_api_set_collect_verify):
 * the API server reviews @token for CNLab's audience (TokenReview, as
 * kube-apiserver's webhook authenticators do), which says the pod it is
 * bound to; that pod, read now, must be the one cnlabd made for @job under
 * @epoch: its uid the token's, its labels this run's, and its proof
 * (which only cnlabd makes, for that uid).  So the collector's Secret,
 * mounted in a pod of someone else's, is worth nothing there.  Called
 * from the API's request threads, without the API's lock.
 */
static int collect_verify(void *ud, const char *job, int64_t epoch,
                          const char *token, char *why, size_t whylen)
{
	struct cnl_kube_sched *ks = ud;
	json_t *rv = NULL, *pod = NULL, *st, *extra, *body;
	const char *user, *pname, *puid, *ns_end;
	char ns[64], path[512], err[512], ep[32], want[65];
	long code;
	bool aud = false;
	size_t i;
	json_t *v;

	body =
	    json_pack("{s:s,s:s,s:{s:s,s:[s]}}", "apiVersion",
	              "authentication.k8s.io/v1", "kind", "TokenReview", "spec",
	              "token", token, "audiences", CNL_KUBE_COLLECT_AUDIENCE);
	pthread_mutex_lock(&ks->review_mu);
	code = cnl_kube_call(ks->kr, "POST",
	                     "/apis/authentication.k8s.io/v1/tokenreviews",
	                     body, NULL, &rv, err, sizeof(err));
	pthread_mutex_unlock(&ks->review_mu);
	cnl_json_wipe(body);
	json_decref(body);
	if (code != 201 && code != 200) {
		cnl_log(CNL_LOG_WARN, "kube: a token review failed", "err=%s",
		        err);
		cnl_seterr(why, whylen, "the API server did not review it (%s)",
		           code < 0 ? "no answer" : err);
		goto no;
	}
	st = json_object_get(rv, "status");
	json_array_foreach (json_object_get(st, "audiences"), i, v)
		aud |=
		    json_is_string(v) && strcmp(json_string_value(v),
		                                CNL_KUBE_COLLECT_AUDIENCE) == 0;
	user = S(json_object_get(st, "user"), "username");
	extra = json_object_get(json_object_get(st, "user"), "extra");
	pname = json_string_value(json_array_get(
	    json_object_get(extra, "authentication.kubernetes.io/pod-name"),
	    0));
	puid = json_string_value(json_array_get(
	    json_object_get(extra, "authentication.kubernetes.io/pod-uid"), 0));
	if (!json_is_true(json_object_get(st, "authenticated")) || !aud) {
		cnl_seterr(why, whylen, "the API server does not take it%s%s",
		           S(st, "error") ? ": " : "", S(st, "error") ?: "");
		goto no;
	}
	/* system:serviceaccount:NAMESPACE:NAME, bound to a pod. */
	if (!user || strncmp(user, "system:serviceaccount:", 22) != 0 ||
	    !(ns_end = strchr(user + 22, ':')) ||
	    (size_t)(ns_end - (user + 22)) >= sizeof(ns) || !pname || !puid) {
		cnl_seterr(why, whylen,
		           "it is not a pod's ServiceAccount token");
		goto no;
	}
	snprintf(ns, sizeof(ns), "%.*s", (int)(ns_end - (user + 22)),
	         user + 22);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns,
	         pname);
	pthread_mutex_lock(&ks->review_mu);
	code = cnl_kube_call(ks->kr, "GET", path, NULL, NULL, &pod, err,
	                     sizeof(err));
	pthread_mutex_unlock(&ks->review_mu);
	const json_t *md = json_object_get(pod, "metadata");
	const char *lab_job = S(json_object_get(md, "labels"), "cnlab.io/job");
	const char *lab_ep = S(json_object_get(md, "labels"), "cnlab.io/epoch");
	const char *proof = S(json_object_get(md, "annotations"), PROOF_ANN);

	snprintf(ep, sizeof(ep), "%" PRId64, epoch);
	run_proof(ks, puid, job, epoch, ns, pname, want);
	if (code != 200 && code != 404) {
		cnl_seterr(why, whylen, "its pod %s/%s could not be read (%s)",
		           ns, pname, code < 0 ? "no answer" : err);
		goto no;
	}
	if (code != 200 || !S(md, "uid") || strcmp(S(md, "uid"), puid) != 0 ||
	    !lab_job || strcmp(lab_job, job) != 0 || !lab_ep ||
	    strcmp(lab_ep, ep) != 0 || !want[0] || !proof ||
	    strlen(proof) != 64 || CRYPTO_memcmp(want, proof, 64) != 0) {
		cnl_log(CNL_LOG_WARN,
		        "kube: a collector's credential from another pod",
		        "job=%s epoch=%" PRId64 " pod=%s/%s", job, epoch, ns,
		        pname);
		cnl_seterr(why, whylen,
		           "it is the token of pod %s/%s, not of the pod CNLab "
		           "made for job %s under epoch %" PRId64,
		           ns, pname, job, epoch);
		goto no;
	}
	json_decref(rv);
	json_decref(pod);
	return 0;
no:
	json_decref(rv);
	json_decref(pod);
	return -1;
}

/* ---- cnlab server exec in a server's pod ----------------------------- */

/* One exec's relay: the API server's stream to the API's socket. */
struct kexec {
	struct cnl_kube_sched *ks;
	struct cnl_kube *k;
	struct cnl_kube_exec *x;
	int fd; /* ours of the socket pair */
	char pod[320];
};

/* @iov (@cnt pieces) to the API's side; 0, or -1 when it is gone (or
 * does not read while cnlabd stops). */
static int kexec_writev(struct kexec *e, struct iovec *iov, size_t cnt)
{
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = cnt};
	size_t want = 0;

	for (size_t i = 0; i < cnt; i++)
		want += iov[i].iov_len;
	while (want) {
		ssize_t w = sendmsg(e->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = {.fd = e->fd, .events = POLLOUT};

			if (atomic_load(&e->ks->stop))
				return -1;
			(void)poll(&pf, 1, 1000);
			continue;
		}
		if (w <= 0)
			return -1;
		want -= (size_t)w;
		while (w > 0 && m.msg_iovlen) {
			size_t take = (size_t)w < m.msg_iov->iov_len
			                  ? (size_t)w
			                  : m.msg_iov->iov_len;

			m.msg_iov->iov_base =
			    (char *)m.msg_iov->iov_base + take;
			m.msg_iov->iov_len -= take;
			w -= (ssize_t)take;
			if (!m.msg_iov->iov_len) {
				m.msg_iov++;
				m.msg_iovlen--;
			}
		}
	}
	return 0;
}

/* An exec frame to the API's side, as kexec_writev(). */
static int kexec_frame(struct kexec *e, int kind, const void *data, size_t n)
{
	unsigned char h[5];
	struct iovec iov[2] = {{h, 5}, {(void *)data, n}};

	cnl_wire_exec_head(h, kind, (uint32_t)n);
	return kexec_writev(e, iov, n ? 2 : 1);
}

/* The end of a relay's thread: its socket, exec and connection closed,
 * counted out (cnl_kube_sched_stop waits for the count). */
static void kexec_done(struct kexec *e)
{
	struct cnl_kube_sched *ks = e->ks;

	close(e->fd);
	cnl_kube_exec_close(e->x);
	cnl_kube_close(e->k);
	pthread_mutex_lock(&ks->exec_mu);
	ks->execs--;
	pthread_cond_broadcast(&ks->exec_cv);
	pthread_mutex_unlock(&ks->exec_mu);
	free(e);
}

/*
 * The exit code in the exec's closing Status (channel 3): 0 for
 * "Success"; the code of a "NonZeroExitCode" (its cause "ExitCode", as
 * kubelets report a command's end); else -1 with its message in @msg (the
 * exec failed: no such container, say).
 */
static int kexec_status(const char *data, size_t n, char *msg, size_t len)
{
	json_t *st = json_loadb(data, n, 0, NULL), *c;
	const char *s = S(st, "status"), *reason = S(st, "reason");
	int code = -1;
	size_t i;

	snprintf(msg, len, "%s",
	         S(st, "message") ?: "the exec ended without a status");
	for (char *m = msg; *m; m++) /* the server's words, to a terminal */
		if ((unsigned char)*m < 0x20 || *m == 0x7f)
			*m = '?';
	if (s && strcmp(s, "Success") == 0)
		code = 0;
	else if (reason && strcmp(reason, "NonZeroExitCode") == 0)
		json_array_foreach (
		    json_object_get(json_object_get(st, "details"), "causes"),
		    i, c) {
			const char *r = S(c, "reason"), *v = S(c, "message");
			char *e;
			long x;

			if (!r || strcmp(r, "ExitCode") != 0 || !v)
				continue;
			errno = 0;
			x = strtol(v, &e, 10);
			if (!errno && e != v && !*e && x >= 0 && x <= 255)
				code = (int)x;
		}
	json_decref(st);
	return code;
}

/* Whether the API's side closed its end of @fd (what it sends is not
 * read: the command has no stdin). */
static bool kexec_peer_gone(int fd)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	char b[512];

	while (poll(&pf, 1, 0) > 0) {
		ssize_t r = recv(fd, b, sizeof(b), MSG_DONTWAIT);

		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return true;
		if (r < 0)
			return false;
	}
	return false;
}

static void *kexec_thread(void *arg)
{
	struct kexec *e = arg;
	struct cnl_kube_sched *ks = e->ks;
	char msg[512] = "";
	int code = -1, ch;
	bool gone = false, ended = false;

	while (!atomic_load(&ks->stop)) {
		const char *d;
		size_t n;
		int r = cnl_kube_exec_next(e->x, 1000, &ch, &d, &n);

		if (r == -EAGAIN) {
			if ((gone = kexec_peer_gone(e->fd)))
				break;
			continue;
		}
		if (r <= 0) {
			ended = r == 0;
			if (r < 0)
				snprintf(msg, sizeof(msg),
				         "the API server's exec stream broke "
				         "(%s)",
				         strerror(-r));
			break;
		}
		if ((ch == CNL_WIRE_EXEC_STDOUT ||
		     ch == CNL_WIRE_EXEC_STDERR) &&
		    n && kexec_frame(e, ch, d, n) < 0) {
			gone = true;
			break;
		}
		if (ch == 3) /* the end: the stream closes after it */
			code = kexec_status(d, n, msg, sizeof(msg));
	}
	if (!gone) {
		unsigned char c[4];

		if (code < 0) {
			char line[700];
			int l = snprintf(
			    line, sizeof(line), "cnlab: exec in pod %s: %s\n",
			    e->pod,
			    msg[0]   ? msg
			    : !ended ? "cnlabd is stopping"
			             : "the exec ended without a status");

			(void)kexec_frame(e, CNL_WIRE_EXEC_STDERR, line,
			                  (size_t)l < sizeof(line)
			                      ? (size_t)l
			                      : sizeof(line) - 1);
		}
		/* 126, as a shell says of a command it could not run. */
		cnl_wire_exec_code(c, code < 0 ? 126 : code);
		(void)kexec_frame(e, CNL_WIRE_EXEC_EXIT, c, 4);
	}
	kexec_done(e);
	return NULL;
}

/*
 * The pod of server @server that an exec or an ssh session goes to: the
 * pod its worker last saw running for it, read again now and taken only
 * if it is still that pod (its uid), running, this server's (its labels)
 * and made by cnlabd (its proof), with the images and containers cnlabd
 * gave it: a tenant's pod named or labelled like it is never exec'd into,
 * nor one an ephemeral container was added to (it would see the command
 * and its output).  0 with a connection of its own to the API server in
 * *@ret_k and the pod's namespace and name; or -1 with @why.
 */
static int exec_target(struct cnl_kube_sched *ks, const char *server,
                       struct cnl_kube **ret_k, char *ns, size_t nslen,
                       char *name, size_t namelen, char *why, size_t whylen)
{
	json_t *at, *pod = NULL;
	char uid[64] = "", path[512], err[512];
	char ep[32], want[65];
	int64_t epoch = 0;
	struct cnl_kube *k = NULL;
	/* The pod as read now, with the images cnlabd gave it, for
	 * run_tampered(). */
	struct pod tmp = {.server = true};
	long code;

	ns[0] = name[0] = '\0';
	pthread_mutex_lock(&ks->exec_mu);
	if ((at = json_object_get(ks->srv_pods, server))) {
		snprintf(ns, nslen, "%s", S(at, "ns") ?: "");
		snprintf(name, namelen, "%s", S(at, "name") ?: "");
		snprintf(uid, sizeof(uid), "%s", S(at, "uid") ?: "");
		epoch = json_integer_value(json_object_get(at, "epoch"));
		snprintf(tmp.image, sizeof(tmp.image), "%s",
		         S(at, "image") ?: "");
		snprintf(tmp.collect_image, sizeof(tmp.collect_image), "%s",
		         S(at, "collect_image") ?: "");
	}
	pthread_mutex_unlock(&ks->exec_mu);
	if (!name[0]) {
		cnl_seterr(why, whylen, "its pod is not running yet");
		return -1;
	}
	if (cnl_kube_open(
	        &(struct cnl_kube_config){.server = ks->cfg.kube.server,
	                                  .token_file = ks->cfg.kube.token_file,
	                                  .cafile = ks->cfg.kube.cafile,
	                                  .retries = 1,
	                                  .timeout_ms = 10000},
	        &k, err, sizeof(err)) < 0) {
		cnl_seterr(why, whylen, "%s", err);
		return -1;
	}
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
	code =
	    cnl_kube_call(k, "GET", path, NULL, NULL, &pod, err, sizeof(err));
	const json_t *md = json_object_get(pod, "metadata");
	const json_t *lab = json_object_get(md, "labels");
	const char *proof = S(json_object_get(md, "annotations"), PROOF_ANN);
	const char *phase = S(json_object_get(pod, "status"), "phase");

	snprintf(ep, sizeof(ep), "%" PRId64, epoch);
	run_proof(ks, uid, server, epoch, ns, name, want);
	if (code != 200 || !S(md, "uid") || strcmp(S(md, "uid"), uid) != 0 ||
	    json_object_get(md, "deletionTimestamp") ||
	    !S(lab, "cnlab.io/server") ||
	    strcmp(S(lab, "cnlab.io/server"), server) != 0 ||
	    !S(lab, "cnlab.io/epoch") ||
	    strcmp(S(lab, "cnlab.io/epoch"), ep) != 0 || !want[0] || !proof ||
	    strlen(proof) != 64 || CRYPTO_memcmp(want, proof, 64) != 0) {
		cnl_seterr(why, whylen, "its pod %s/%s is %s", ns, name,
		           code < 0 ? "out of reach (the API server did not "
		                      "answer)"
		           : code == 200 ? "not the one CNLab made for it"
		                         : "gone");
		goto fail;
	}
	tmp.obj = pod;
	if (!tmp.image[0] || run_tampered(&tmp)) {
		/* An image swapped, a container added: the worker fails the
		 * server; no exec meanwhile. */
		cnl_seterr(why, whylen,
		           "its pod %s/%s was changed after CNLab made it "
		           "(its images or containers)",
		           ns, name);
		goto fail;
	}
	if (!phase || strcmp(phase, "Running") != 0) {
		cnl_seterr(why, whylen, "its pod %s/%s is %s, not running", ns,
		           name, phase ? phase : "in no phase");
		goto fail;
	}
	*ret_k = k;
	json_decref(pod);
	return 0;
fail:
	json_decref(pod);
	cnl_kube_close(k);
	return -1;
}

/* Exec @x (on connection @k, in pod @ns/@name) relayed by @fn on a thread
 * of ours: 0 with the API's end of the socket pair in *@ret_fd (@k and
 * @x then the thread's), or -1 with @why (both closed). */
static int exec_start(struct cnl_kube_sched *ks, struct cnl_kube *k,
                      struct cnl_kube_exec *x, const char *ns, const char *name,
                      void *(*fn)(void *), int *ret_fd, char *why,
                      size_t whylen)
{
	struct kexec *e;
	pthread_attr_t a;
	pthread_t t;
	int sv[2], r;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		cnl_seterr(why, whylen, "no socket pair: %s", strerror(errno));
		cnl_kube_exec_close(x);
		cnl_kube_close(k);
		return -1;
	}
	e = cnl_xcalloc(1, sizeof(*e));
	e->ks = ks;
	e->k = k;
	e->x = x;
	e->fd = sv[0];
	snprintf(e->pod, sizeof(e->pod), "%s/%s", ns, name);
	pthread_mutex_lock(&ks->exec_mu);
	ks->execs++;
	pthread_mutex_unlock(&ks->exec_mu);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &a, fn, e);
	pthread_attr_destroy(&a);
	if (r != 0) {
		close(sv[1]);
		kexec_done(e); /* as the thread would have ended */
		cnl_seterr(why, whylen, "cannot start a thread");
		return -1;
	}
	*ret_fd = sv[1];
	return 0;
}

/*
 * `cnlab server exec` in server @server's pod (cnl_api_set_kube_exec):
 * the pod exec_target() takes; the command runs in its container
 * "server" through the API server's exec (pods/exec), as the container's
 * user; its output comes back in exec frames from a thread of ours.
 * Called from the API's relay thread, without its lock.
 */
static int server_exec(void *ud, const char *server, const char *const *argv,
                       size_t argc, int *ret_fd, char *why, size_t whylen)
{
	struct cnl_kube_sched *ks = ud;
	struct cnl_kube *k = NULL;
	struct cnl_kube_exec *x = NULL;
	char ns[64], name[254], err[512];
	long code;

	if (exec_target(ks, server, &k, ns, sizeof(ns), name, sizeof(name), why,
	                whylen) < 0)
		return -1;
	code = cnl_kube_exec_open(k, ns, name, "server", argv, argc, 0, &x, err,
	                          sizeof(err));
	if (code != 101) {
		cnl_log(CNL_LOG_WARN, "kube: an exec was refused", "err=%s",
		        err);
		cnl_seterr(why, whylen, "the API server refused the exec (%s)",
		           err);
		cnl_kube_close(k);
		return -1;
	}
	return exec_start(ks, k, x, ns, name, kexec_thread, ret_fd, why,
	                  whylen);
}

/* ---- cnlab server ssh in a server's pod ------------------------------ */

/*
 * What runs in the pod's container "server" for a session, as its user
 * (the tenant, CNL_KUBE_TENANT_ID, named in the pod's /etc/passwd as the
 * server's owner).  First on stdin come the host key and the owner's
 * keys, each as its number of lines and the lines (the shell's read
 * takes a byte at a time from a pipe, so what follows is left for sshd),
 * into a folder of its own (0700); then sshd's options the same way, each
 * line one -o: never a file, which another process of the server's user
 * (a member's terminal) could change before sshd reads it; SetEnv is the
 * container's own environment (the image's ENV and the pod's, as an
 * agent gives a session its container's), less sshd's own variables and
 * values sshd_config cannot hold (a line of `env` that is not a whole
 * variable, the rest of a value of several lines, is not one).  The
 * lent sshd runs without the image's preloads, audit modules, library
 * path or OpenSSL configuration (the session gets them back through
 * SetEnv), so that what the image's C library would load does not break
 * it.  Then sshd in inetd mode, on the same
 * stdin and stdout, its log on stderr: the image's, else the one the
 * server's init container copied from the agent's image (its own loader
 * and libraries: scripts/sshd-bundle), else the user is told there is
 * none; the folder goes when it ends.  Nothing of the session is in the
 * exec's URL (the API server's audit log keeps those).
 */
static const char ssh_script[] =
    "umask 077; d=$(mktemp -d 2>/dev/null) || "
    "{ echo 'cnlab: no folder for the session (mktemp -d)' >&2; exit 126; }; "
    "fail() { rm -rf \"$d\"; exit 126; }; "
    "for f in host_key authorized_keys; do "
    "IFS= read -r n || fail; i=0; : >\"$d/$f\"; "
    "while [ \"$i\" -lt \"$n\" ]; do IFS= read -r l || fail; "
    "printf '%s\\n' \"$l\" >>\"$d/$f\"; i=$((i + 1)); done; done; "
    "set --; IFS= read -r n || fail; i=0; "
    "while [ \"$i\" -lt \"$n\" ]; do IFS= read -r l || fail; "
    "set -- \"$@\" -o \"$l\"; i=$((i + 1)); done; "
    "se=$(env 2>/dev/null | while IFS= read -r l; do "
    "case $l in *=*) ;; *) continue ;; esac; "
    "k=${l%%=*}; case $k in ''|[0-9]*|HOME|USER|LOGNAME|SHELL|MAIL|TERM|"
    "PWD|OLDPWD|SHLVL|_|SSH_*|*[!A-Za-z0-9_]*) continue ;; esac; "
    "eval \"v=\\${$k-}\"; [ \"$k=$v\" = \"$l\" ] || continue; "
    "case $l in *[\\\"\\\\]*|*[[:cntrl:]]*) continue ;; esac; "
    "printf ' \"%s\"' \"$l\"; done); "
    "if [ -n \"$se\" ]; then set -- \"$@\" -o \"SetEnv$se\"; fi; "
    "set -- -i -e -f /dev/null -o \"HostKey=$d/host_key\" "
    "-o \"AuthorizedKeysFile=$d/authorized_keys\" \"$@\"; "
    "if [ -x /usr/sbin/sshd ]; then set -- /usr/sbin/sshd \"$@\"; "
    "elif [ -x /opt/cnlab/sshd/sshd ]; then "
    "unset LD_PRELOAD LD_AUDIT LD_LIBRARY_PATH OPENSSL_CONF OPENSSL_MODULES; "
    "set -- /opt/cnlab/sshd/ld.so --inhibit-cache "
    "--library-path /opt/cnlab/sshd/lib /opt/cnlab/sshd/sshd \"$@\"; "
    "else rm -rf \"$d\"; "
    "echo 'cnlab: no sshd in this server: its image has no /usr/sbin/sshd, "
    "and cnlabd lends none (kube_collect_image, the agent'\"'\"'s image, "
    "holds one)' >&2; exit 127; fi; "
    "\"$@\"; r=$?; rm -rf \"$d\"; exit $r";

/* @text to @x's stdin as the script above reads a file: its number of
 * lines, then the lines (a last one without its newline given one). */
static int ssh_send_file(struct cnl_kube_exec *x, const char *text)
{
	size_t n = strlen(text), lines = 0;
	char head[32];
	int l;

	for (size_t i = 0; i < n; i++)
		lines += text[i] == '\n';
	if (n && text[n - 1] != '\n')
		lines++;
	l = snprintf(head, sizeof(head), "%zu\n", lines);
	if (cnl_kube_exec_send(x, head, (size_t)l) < 0 ||
	    cnl_kube_exec_send(x, text, n) < 0)
		return -EIO;
	if (n && text[n - 1] != '\n')
		return cnl_kube_exec_send(x, "\n", 1);
	return 0;
}

/* @n bytes to the API's side, raw, as kexec_writev(). */
static int kssh_put(struct kexec *e, const char *data, size_t n)
{
	struct iovec iov = {(void *)data, n};

	return kexec_writev(e, &iov, 1);
}

/* Whether the API server takes bytes now, waited for while cnlabd does
 * not stop: what goes to sshd's stdin is read from the caller only then
 * (and at most 16 KiB of it), so a server that stops reading does not
 * hold the thread in a write past a stop. */
static bool kssh_writable(struct kexec *e)
{
	struct pollfd pf = {.fd = cnl_kube_exec_fd(e->x), .events = POLLOUT};

	while (!atomic_load(&e->ks->stop)) {
		int r = poll(&pf, 1, 1000);

		if (r > 0)
			return !(pf.revents & (POLLERR | POLLNVAL));
		if (r < 0 && errno != EINTR)
			return false;
	}
	return false;
}

/* One session's relay: what the API's side sends to sshd's stdin, sshd's
 * stdout back, its stderr kept for the log (and, when sshd said nothing
 * on stdout, its last line to the caller, as an agent tells why a session
 * did not begin). */
static void *kssh_thread(void *arg)
{
	struct kexec *e = arg;
	struct cnl_kube_sched *ks = e->ks;
	char errbuf[2048] = "", buf[16384], q[600];
	size_t errn = 0, out = 0;
	int code = -1, ch;
	bool done = false;

	while (!done && !atomic_load(&ks->stop)) {
		struct pollfd pf[2] = {{e->fd, POLLIN, 0},
		                       {cnl_kube_exec_fd(e->x), POLLIN, 0}};
		const char *d;
		size_t n;
		int r;

		/* A frame there already: no wait for the socket. */
		if (poll(pf, 2, cnl_kube_exec_pending(e->x) ? 0 : 1000) < 0 &&
		    errno != EINTR)
			break;
		if ((pf[0].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    kssh_writable(e)) {
			ssize_t k = recv(e->fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (k == 0 ||
			    (k < 0 && errno != EAGAIN && errno != EINTR)) {
				/* The caller is gone: sshd's input ends
				 * (v5), then the stream. */
				(void)cnl_kube_exec_send_eof(e->x);
				break;
			}
			if (k > 0 &&
			    cnl_kube_exec_send(e->x, buf, (size_t)k) < 0)
				break;
		}
		/* Every message there (a TLS record may hold several). */
		while ((r = cnl_kube_exec_next(e->x, 0, &ch, &d, &n)) == 1) {
			if (ch == CNL_WIRE_EXEC_STDOUT && n) {
				out += n;
				if (kssh_put(e, d, n) < 0) {
					done = true;
					break;
				}
			} else if (ch == CNL_WIRE_EXEC_STDERR && n) {
				/* The last bytes of sshd's log. */
				if (n >= sizeof(errbuf) - 1) {
					d += n - (sizeof(errbuf) - 1);
					n = sizeof(errbuf) - 1;
				}
				if (errn + n > sizeof(errbuf) - 1) {
					size_t drop =
					    errn + n - (sizeof(errbuf) - 1);

					memmove(errbuf, errbuf + drop,
					        errn - drop);
					errn -= drop;
				}
				memcpy(errbuf + errn, d, n);
				errbuf[errn += n] = '\0';
			} else if (ch == 3) {
				char msg[512];

				code = kexec_status(d, n, msg, sizeof(msg));
			}
		}
		if (r != -EAGAIN)
			done = true;
	}
	if (out == 0) {
		char line[1024], *nl;
		int l;

		while (errn > 0 &&
		       (errbuf[errn - 1] == '\n' || errbuf[errn - 1] == '\r'))
			errbuf[--errn] = '\0';
		nl = strrchr(errbuf, '\n');
		l = snprintf(
		    line, sizeof(line),
		    "cnlab: sshd did not start in the server's pod %s%s"
		    "%s\n",
		    e->pod, errn ? ": " : "", nl ? nl + 1 : errbuf);
		for (int i = 0; i < l - 1 && (size_t)i < sizeof(line); i++)
			if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
				line[i] = '?';
		(void)kssh_put(e, line,
		               (size_t)l < sizeof(line) ? (size_t)l
		                                        : sizeof(line) - 1);
	}
	cnl_log(CNL_LOG_INFO, "ssh session ended",
	        "pod=%s bytes_out=%zu code=%d sshd=%s", e->pod, out, code,
	        cnl_log_quote(q, sizeof(q), errbuf));
	kexec_done(e);
	return NULL;
}

/*
 * `cnlab server ssh` in server @server's pod (cnl_api_set_kube_ssh): the
 * pod exec_target() takes; ssh_script through the API server's exec, with
 * stdin, its files sent first: the server's host key (@host_key), the
 * owner's keys (@keys) and the options of common/sshd.h.
 */
static int server_ssh(void *ud, const char *server, const char *host_key,
                      const char *keys, int *ret_fd, char *why, size_t whylen)
{
	struct cnl_kube_sched *ks = ud;
	const char *argv[] = {"/bin/sh", "-c", ssh_script, "cnlab-ssh"};
	struct cnl_kube *k = NULL;
	struct cnl_kube_exec *x = NULL;
	char ns[64], name[254], err[512], *cfg;
	long code;

	if (exec_target(ks, server, &k, ns, sizeof(ns), name, sizeof(name), why,
	                whylen) < 0)
		return -1;
	cfg = cnl_sshd_config(NULL, NULL);
	code = cnl_kube_exec_open(k, ns, name, "server", argv,
	                          CNL_ARRAY_SIZE(argv), CNL_KUBE_EXEC_STDIN, &x,
	                          err, sizeof(err));
	if (code != 101) {
		free(cfg);
		cnl_log(CNL_LOG_WARN, "kube: an ssh exec was refused", "err=%s",
		        err);
		cnl_seterr(why, whylen, "the API server refused the exec (%s)",
		           err);
		cnl_kube_close(k);
		return -1;
	}
	if (ssh_send_file(x, host_key) < 0 || ssh_send_file(x, keys) < 0 ||
	    ssh_send_file(x, cfg) < 0) {
		free(cfg);
		cnl_seterr(why, whylen,
		           "the session's files could not be sent to pod %s/%s",
		           ns, name);
		cnl_kube_exec_close(x);
		cnl_kube_close(k);
		return -1;
	}
	free(cfg);
	return exec_start(ks, k, x, ns, name, kssh_thread, ret_fd, why, whylen);
}

/* The image of run @a as its pod runs it into @ref: from the registry
 * CNLab's images are pushed to, pinned to the digest CNLab has (a tag
 * there cannot point elsewhere); without a registry set, its name as an
 * OCI reference; without --image, the default.  -ENOENT: the image was
 * deleted from CNLab. */
static int run_image(const struct cnl_kube_sched *ks,
                     const struct cnl_wire_assignment *a, char *ref, size_t len)
{
	if (!a->image[0])
		snprintf(ref, len, "%s", ks->image);
	else if (!ks->registry[0])
		snprintf(ref, len, "%s", a->image);
	else if (!a->image_digest[0])
		return -ENOENT;
	else
		snprintf(ref, len, "%s/%s@%s", ks->registry, a->image,
		         a->image_digest);
	return 0;
}

/* Whether run pod @p runs another image than cnlabd made it with (a
 * container's image is the one field of a pod's spec anyone who may
 * patch pods can change). */
static bool run_tampered(const struct pod *p)
{
	if (p->tampered)
		return true;
	const json_t *spec = json_object_get(p->obj, "spec");
	const json_t *cs = json_object_get(spec, "containers");
	const json_t *ic = json_object_get(spec, "initContainers"), *x;
	const char *img = S(json_array_get(cs, 0), "image");
	int inputs = 0, ours = 0;
	size_t i;

	/* The init container that checks the inputs runs the same image,
	 * the collector (a server's notebook) the one cnlabd gave it; no
	 * other is added, nor an ephemeral container (it could rewrite
	 * /workspace). */
	json_array_foreach (ic, i, x) {
		const char *n = S(x, "name") ?: "", *im = S(x, "image");
		if (strcmp(n, "inputs") == 0 && !inputs++ && im &&
		    strcmp(im, p->image) == 0)
			continue;
		if (strcmp(n, p->server ? "notebook" : "collect") == 0 &&
		    !ours++ && im && p->collect_image[0] &&
		    strcmp(im, p->collect_image) == 0)
			continue;
		return true;
	}
	return json_array_size(cs) != 1 || !img ||
	       json_array_size(json_object_get(spec, "ephemeralContainers")) ||
	       strcmp(img, p->image) != 0;
}

/* The object @name of @resource (in API group/version @gv, NULL: the core
 * group) of namespace @ns if the pod of uid @uid owns it (a new
 * reference), else NULL. */
static json_t *run_owned(struct cnl_kube_sched *ks, const char *ns,
                         const char *gv, const char *resource, const char *name,
                         const char *uid)
{
	char path[512], err[256];
	json_t *o = NULL;

	if (gv)
		snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/%s/%s", gv,
		         ns, resource, name);
	else
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/%s/%s", ns,
		         resource, name);
	if (cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
	                  sizeof(err)) == 200) {
		const json_t *r = json_array_get(
		    json_object_get(json_object_get(o, "metadata"),
		                    "ownerReferences"),
		    0);
		if (r && S(r, "uid") && strcmp(S(r, "uid"), uid) == 0)
			return o;
	}
	json_decref(o);
	return NULL;
}

/* Whether the pod @ns/@name that a create of run @a's pod met (409) is
 * one cnlabd made and lost the reply of (this run's labels, no proof
 * yet): then it is deleted, to be made again. */
static bool run_unproven_mine(struct cnl_kube_sched *ks,
                              const struct cnl_wire_assignment *a,
                              const char *ns, const char *name)
{
	char path[512], err[256], ep[32];
	json_t *o = NULL;
	bool mine = false;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
	snprintf(ep, sizeof(ep), "%" PRId64, a->epoch);
	if (cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &o, err,
	                  sizeof(err)) == 200) {
		const json_t *md = json_object_get(o, "metadata");
		const json_t *lab = json_object_get(md, "labels");
		mine = S(lab, "cnlab.io/job") &&
		       strcmp(S(lab, "cnlab.io/job"), a->id) == 0 &&
		       S(lab, "cnlab.io/epoch") &&
		       strcmp(S(lab, "cnlab.io/epoch"), ep) == 0 &&
		       !S(json_object_get(md, "annotations"), PROOF_ANN);
	}
	json_decref(o);
	if (mine) {
		/* (A tenant's pod made like it goes the same way: this name
		 * is the run's.) */
		struct pod tmp = {0};
		snprintf(tmp.ns, sizeof(tmp.ns), "%s", ns);
		snprintf(tmp.name, sizeof(tmp.name), "%s", name);
		run_delete(ks, &tmp, 1);
	}
	return mine;
}

/* The job of @a ends failed on node @ni, saying why. */
static void run_fail(struct cnl_kube_sched *ks, int ni,
                     const struct cnl_wire_assignment *a, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void run_fail(struct cnl_kube_sched *ks, int ni,
                     const struct cnl_wire_assignment *a, const char *fmt, ...)
{
	struct pod tmp = {.node = ni, .epoch = a->epoch};
	char msg[CNL_WIRE_MESSAGE_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(tmp.job, sizeof(tmp.job), "%s", a->id);
	report(ks, &tmp, CNL_WIRE_REPORT_FAILED, 1, msg);
	cnl_log(CNL_LOG_INFO, "kube: a run job cannot become a pod",
	        "job=%s why=\"%s\"", a->id, msg);
}

/* The secrets a run's pod gets: their names, the variables asked for
 * (NULL where none), and {"NAME": base64} for its Secret. */
struct run_secrets {
	char *name[CNL_WIRE_SECRETS_MAX], *env[CNL_WIRE_SECRETS_MAX];
	size_t n;
	json_t *data;
};

/* Forget @rs, its values first. */
static void run_secrets_done(struct run_secrets *rs)
{
	cnl_json_wipe(rs->data);
	json_decref(rs->data);
	for (size_t i = 0; i < rs->n; i++) {
		free(rs->name[i]);
		free(rs->env[i]);
	}
	memset(rs, 0, sizeof(*rs));
}

/* The secrets of @a's job, fetched as node @ni fetches a workload's (POST
 * /v1/nodes/{node}/secrets: cnlabd checks the node runs it under that
 * epoch and audits secret.use) into @rs.  0; -EIO (try again); another
 * negative errno with @err, the reason the job fails (a secret deleted
 * since, a NUL byte in one asked for as a variable). */
static int run_secrets(struct cnl_kube_sched *ks, int ni,
                       const struct cnl_wire_assignment *a,
                       struct run_secrets *rs, char *err, size_t errlen)
{
	struct node *n = &ks->nodes[ni];
	char path[256];
	json_t *reply = NULL, *it;
	size_t i;
	long st;
	int r = 0;

	memset(rs, 0, sizeof(*rs));
	rs->data = json_object();
	snprintf(path, sizeof(path),
	         "/v1/nodes/%s/secrets?job=%s&epoch=%" PRId64, n->id, a->id,
	         a->epoch);
	ks->as = n->cred;
	st = cnl_client_call(ks->nodecl, "POST", path, NULL, 0, &reply, err,
	                     errlen);
	if (st < 0 || st >= 500 || st == 429) {
		r = -EIO;
		goto out;
	}
	if (st != 200) {
		/* cnlabd's words, without the route. */
		const char *m = strstr(err, "/secrets?");
		char why[512];
		m = m ? strstr(m, ": ") : NULL;
		snprintf(why, sizeof(why), "%s", m ? m + 2 : err);
		cnl_seterr(err, errlen, "cannot fetch its secrets: %s", why);
		r = -EPERM;
		goto out;
	}
	json_array_foreach (json_object_get(reply, "items"), i, it) {
		const char *name = S(it, "name"), *env = S(it, "env"),
		           *b64 = S(it, "value_base64");
		uint8_t *v = NULL;
		size_t len = 0;

		/* cnlabd checked the names; a key of a Secret all the
		 * same ([-._a-zA-Z0-9]+, not "." or ".."). */
		if (!name || !b64 || !name[0] || i >= CNL_WIRE_SECRETS_MAX ||
		    strspn(name, "abcdefghijklmnopqrstuvwxyz"
		                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") !=
		        strlen(name) ||
		    name[0] == '.' ||
		    cnl_b64_decode_new(b64, CNL_B64_STD | CNL_B64_PAD,
		                       64 * 1024, &v, &len) < 0) {
			cnl_seterr(
			    err, errlen,
			    "its secrets: cnlabd's reply does not decode");
			r = -EPROTO;
			goto out;
		}
		bool nul = memchr(v, '\0', len) != NULL;
		explicit_bzero(v, len);
		free(v);
		if (env && nul) {
			cnl_seterr(err, errlen,
			           "secret \"%s\" holds a NUL byte: it cannot "
			           "be the variable %s (use its file, "
			           "/run/secrets/%s)",
			           name, env, name);
			r = -EINVAL;
			goto out;
		}
		json_object_set_new(rs->data, name, json_string(b64));
		rs->name[rs->n] = cnl_xstrdup(name);
		rs->env[rs->n] = env ? cnl_xstrdup(env) : NULL;
		rs->n++;
	}
out:
	cnl_json_wipe(reply);
	json_decref(reply);
	if (r < 0)
		run_secrets_done(rs);
	return r;
}

/* A child of run pod @p (its claim, inputs or secrets) refused with
 * status @st: the pod goes; made again when the API server may take the
 * child later (no answer, 5xx, 429), else the job fails with @why, or
 * "@refused: @err" when @why is NULL. */
static void run_child_refused(struct cnl_kube_sched *ks, int ni,
                              const struct cnl_wire_assignment *a,
                              struct pod *p, long st, const char *refused,
                              const char *why, const char *err, bool *again)
{
	if (st < 0 || st >= 500 || st == 429)
		*again = true; /* the pod made again */
	else if (why)
		run_fail(ks, ni, a, "%s", why);
	else
		run_fail(ks, ni, a, "%s: %s", refused, err);
	run_delete(ks, p, 0);
	forget(ks, p);
}

/* A run job's inputs as its pod takes them: each path and SHA-256 (hex),
 * and their bytes in ConfigMaps' binaryData, maps[m] = {"inN": base64}. */
struct run_in {
	char **paths, **sums;
	size_t n;
	json_t *maps; /* array */
};

static void run_in_done(struct run_in *in)
{
	for (size_t i = 0; i < in->n; i++) {
		free(in->paths[i]);
		free(in->sums[i]);
	}
	free(in->paths);
	free(in->sums);
	json_decref(in->maps);
	memset(in, 0, sizeof(*in));
}

/* Whether input @x goes before input @z in first-fit decreasing: larger,
 * then by index. */
static bool bigger(const struct cnl_wire_files *fs, size_t x, size_t z)
{
	int64_t sx = fs->items[x].size, sz = fs->items[z].size;

	return sx != sz ? sx > sz : x < z;
}

/* The inputs of @a's job, fetched as node @ni, into @in: in ConfigMaps of
 * RUN_MAP_BYTES at most, packed first-fit decreasing.  0;
 * -E2BIG or -EINVAL with @err (the job cannot run here); -EIO (try
 * again). */
static int run_inputs(struct cnl_kube_sched *ks, int ni,
                      const struct cnl_wire_assignment *a, struct run_in *in,
                      char *err, size_t errlen)
{
	struct node *n = &ks->nodes[ni];
	struct cnl_wire_files fs = {0};
	char path[CNL_KUBE_RUN_PATH_MAX * 3 + 256];
	json_t *o = NULL;
	size_t total = 0, n_maps = 0, load[RUN_INPUT_MAPS + 1] = {0};
	size_t *order = NULL, *map_of = NULL;
	long st;
	int r = 0;

	memset(in, 0, sizeof(*in));
	snprintf(path, sizeof(path),
	         "/v1/nodes/%s/inputs?job=%s&epoch=%" PRId64, n->id, a->id,
	         a->epoch);
	ks->as = n->cred;
	st = cnl_client_call(ks->nodecl, "GET", path, NULL, 0, &o, err, errlen);
	if (st != 200 || cnl_wire_files_decode(o, &fs, err, errlen) < 0) {
		json_decref(o);
		return -EIO;
	}
	json_decref(o);
	/* The ConfigMaps they need: the largest first, each in the first
	 * with room (which one holds a key does not matter: the init
	 * container's volume projects them all). */
	for (size_t i = 0; i < fs.n; i++) {
		size_t sz = (size_t)fs.items[i].size;
		total += sz;
		if (sz > RUN_MAP_BYTES) {
			cnl_seterr(err, errlen,
			           "its input %s (%zu bytes) is more than a "
			           "ConfigMap holds (%d bytes): put it in an "
			           "image or a dataset",
			           fs.items[i].path, sz, RUN_MAP_BYTES);
			r = -E2BIG;
			goto out;
		}
	}
	if (fs.n > RUN_INPUTS_MAX) {
		cnl_seterr(err, errlen,
		           "its inputs (%zu files) are more than a pod takes "
		           "(%d): put them in an image or a dataset",
		           fs.n, RUN_INPUTS_MAX);
		r = -E2BIG;
		goto out;
	}
	order = cnl_xcalloc(fs.n + 1, sizeof(*order));
	map_of = cnl_xcalloc(fs.n + 1, sizeof(*map_of));
	for (size_t i = 0; i < fs.n; i++) { /* by insertion: 256 at most */
		size_t q = i;
		while (q > 0 && bigger(&fs, i, order[q - 1]))
			q--;
		memmove(order + q + 1, order + q, (i - q) * sizeof(*order));
		order[q] = i;
	}
	for (size_t q = 0; q < fs.n; q++) {
		size_t i = order[q], sz = (size_t)fs.items[i].size, m = 0;
		while (m < n_maps && load[m] + sz > RUN_MAP_BYTES)
			m++;
		if (m == n_maps && n_maps++ == RUN_INPUT_MAPS) {
			cnl_seterr(
			    err, errlen,
			    "its inputs (%zu files, %zu bytes) need more "
			    "ConfigMaps than a pod takes (%d of %d "
			    "bytes): put them in an image or a dataset",
			    fs.n, total, RUN_INPUT_MAPS, RUN_MAP_BYTES);
			r = -E2BIG;
			goto out;
		}
		load[m] += sz;
		map_of[i] = m;
	}
	in->paths = cnl_xcalloc(fs.n + 1, sizeof(*in->paths));
	in->sums = cnl_xcalloc(fs.n + 1, sizeof(*in->sums));
	in->maps = json_array();
	for (size_t m = 0; m < n_maps; m++)
		json_array_append_new(in->maps, json_object());
	for (size_t k = 0; k < fs.n; k++) {
		const struct cnl_wire_file *f = &fs.items[k];
		struct cnl_client_reply rep;
		uint8_t sum[32];
		char hex[65], key[32], *b64;
		size_t blen;

		if (strlen(f->path) >= CNL_KUBE_RUN_PATH_MAX) {
			cnl_seterr(err, errlen, "input %s: path too long",
			           f->path);
			r = -EINVAL;
			goto out;
		}
		char *ep = cnl_client_url_escape(f->path);
		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/inputs/file?job=%s&epoch=%" PRId64
		         "&path=%s",
		         n->id, a->id, a->epoch, ep);
		free(ep);
		ks->as = n->cred;
		if (cnl_client_request(ks->nodecl,
		                       &(struct cnl_client_request){
		                           .method = "GET", .path = path},
		                       &rep) < 0 ||
		    rep.status != 200 || rep.len != (size_t)f->size) {
			cnl_seterr(err, errlen, "input %s: not fetched (%ld)",
			           f->path, rep.status);
			cnl_client_reply_done(&rep);
			r = -EIO;
			goto out;
		}
		cnl_client_sha256(rep.body ? rep.body : "", rep.len, sum);
		for (int j = 0; j < 32; j++)
			snprintf(hex + 2 * j, 3, "%02x", sum[j]);
		if (strcmp(hex, f->sha256) != 0) {
			cnl_seterr(err, errlen,
			           "input %s: its bytes are not its SHA-256",
			           f->path);
			cnl_client_reply_done(&rep);
			r = -EIO;
			goto out;
		}
		blen = cnl_b64_encoded_len(rep.len, CNL_B64_PAD) + 1;
		b64 = cnl_xmalloc(blen);
		(void)cnl_b64_encode(rep.body ? rep.body : "", rep.len,
		                     CNL_B64_PAD, b64, blen);
		snprintf(key, sizeof(key), "in%zu", k);
		json_object_set_new(json_array_get(in->maps, map_of[k]), key,
		                    json_string(b64));
		free(b64);
		cnl_client_reply_done(&rep);
		in->paths[k] = cnl_xstrdup(f->path);
		in->sums[k] = cnl_xstrdup(hex);
		in->n = k + 1;
	}
out:
	cnl_wire_files_done(&fs);
	free(order);
	free(map_of);
	if (r < 0)
		run_in_done(in);
	return r;
}

static void run_delete(struct cnl_kube_sched *ks, struct pod *p,
                       int64_t grace_s)
{
	char path[512], err[256];
	long st;

	/* 0 would be a forced deletion: a running container not asked to
	 * stop, its slice freed in CNLab while it still runs. */
	if (grace_s < 1)
		grace_s = 1;

	pod_path(p, NULL, path, sizeof(path));
	snprintf(path + strlen(path), sizeof(path) - strlen(path),
	         "?gracePeriodSeconds=%" PRId64, grace_s);
	st = cnl_kube_call(ks->kc, "DELETE", path, NULL, NULL, NULL, err,
	                   sizeof(err));
	if (st == 404)
		p->gone = true;
	else if (st != 200 && st != 202)
		cnl_log(CNL_LOG_WARN, "kube: cannot delete a run job's pod",
		        "pod=%s/%s err=\"%s\"", p->ns, p->name, err);
}

/* A log line's time, RFC 3339 with nanoseconds as the kubelet writes it
 * ("2026-12-04T23:52:15.123456789Z"), into seconds and nanoseconds; -1
 * when it is not one. */
static int log_time(const char *t, size_t n, int64_t *sec, int64_t *nsec)
{
	char buf[48], *dot;
	int64_t ms;

	if (n >= sizeof(buf) || n < 20)
		return -1;
	memcpy(buf, t, n);
	buf[n] = '\0';
	*nsec = 0;
	if ((dot = strchr(buf, '.'))) {
		char *e = dot + 1;
		int digits = 0;
		while (*e >= '0' && *e <= '9' && digits < 9) {
			*nsec = *nsec * 10 + (*e - '0');
			e++;
			digits++;
		}
		while (*e >= '0' && *e <= '9')
			e++;
		for (; digits < 9; digits++)
			*nsec *= 10;
		memmove(dot, e, strlen(e) + 1);
	}
	if (cnl_time_parse_rfc3339(buf, &ms) < 0)
		return -1;
	*sec = ms / 1000;
	return 0;
}

#define RUN_LOG_CHUNK (64 * 1024) /* as the agent's: well within a body */

/* Post @n bytes of output of @p's job at its offset, in chunks; true when
 * CNLab holds them all.  A 416 says how much it holds ("next"): what it
 * has is not sent again, and a gap (it lost some) is taken as it is. */
static bool run_log_post(struct cnl_kube_sched *ks, struct pod *p,
                         const char *data, size_t n)
{
	for (int tries = 0; n > 0 && tries < 1000; tries++) {
		size_t k = n < RUN_LOG_CHUNK ? n : RUN_LOG_CHUNK;
		char path[256], err[256];
		json_t *o = NULL, *body;
		int64_t off = p->log_sent;
		struct cnl_wire_log m = {.epoch = p->epoch,
		                         .has_offset = true,
		                         .offset = off,
		                         .data = (char *)data,
		                         .len = k};
		snprintf(m.id, sizeof(m.id), "%s", p->job);
		body = cnl_wire_log_encode(&m);
		snprintf(path, sizeof(path), "/v1/nodes/%s/logs",
		         ks->nodes[p->node].id);
		ks->as = ks->nodes[p->node].cred;
		long st = cnl_client_call(ks->nodecl, "POST", path, body, 0, &o,
		                          err, sizeof(err));
		json_decref(body);
		json_t *nx = json_object_get(o, "next");
		int64_t next = json_is_integer(nx) ? json_integer_value(nx)
		                                   : off + (int64_t)k;
		json_decref(o);
		if (st == 200 || st == 201 ||
		    (st == 416 && next >= off + (int64_t)k)) {
			p->log_sent =
			    next > off + (int64_t)k ? next : off + (int64_t)k;
			data += k;
			n -= k;
		} else if (st == 416 && json_is_integer(nx) && next > off) {
			data += next - off; /* it has their start */
			n -= (size_t)(next - off);
			p->log_sent = next;
		} else if (st == 416 && json_is_integer(nx)) {
			p->log_sent = next; /* it lost some: on from there */
		} else {
			cnl_log(CNL_LOG_WARN,
			        "kube: a run pod's output not taken",
			        "job=%s err=\"%s\"", p->job, err);
			return false;
		}
	}
	return n == 0;
}

/* What @p's container wrote since CNLab last had it, into its job's
 * output (stdout and stderr come as one stream from the kubelet).  Read
 * with the kubelet's timestamps from the last second it had (sinceTime),
 * so that a long log is not read again from its start each time and a
 * rotated log file does not shift it: the lines up to the last one taken
 * (its time, and how many lines had that time) are skipped; from the
 * first new line on, all are taken, in the file's order (stdout's and
 * stderr's times may interleave).  The cursor moves only past what CNLab
 * holds.  @now < 0: the pod ended, its last line may lack its newline. */
static void run_log(struct cnl_kube_sched *ks, struct pod *p, int64_t now)
{
	bool final = now < 0;

	p->log_at = (final ? 0 : now) + RUN_LOG_MS;
	if (!p->log_read)
		p->log_read = RUN_LOG_READ;
	for (int rounds = 0; rounds < 16; rounds++) {
		char path[700], err[256], since[40];
		char *text = NULL, *out;
		size_t len = 0, o = 0;
		bool took = false, ok = true;
		long st;

		pod_path(p, "log", path, sizeof(path));
		snprintf(path + strlen(path), sizeof(path) - strlen(path),
		         "?container=job&timestamps=true&limitBytes=%zu",
		         p->log_read);
		if (p->log_sec > 0) {
			cnl_time_format_rfc3339(p->log_sec * 1000, since,
			                        sizeof(since));
			char *dot = strchr(since, '.');
			if (dot)
				snprintf(dot, 2, "Z");
			snprintf(path + strlen(path),
			         sizeof(path) - strlen(path), "&sinceTime=%s",
			         since);
		}
		st = cnl_kube_get_text(ks->kc, path, &text, &len, err,
		                       sizeof(err));
		if (st != 200 || !text) {
			free(text);
			return;
		}
		bool full = len >= p->log_read;
		out = cnl_xmalloc(len + 1);
		/* The cursor as it moves; saved once CNLab holds the lines. */
		int64_t csec = p->log_sec, cnsec = p->log_nsec;
		int csame = p->log_same, same = 0;
		for (size_t i = 0; i < len;) {
			char *nl = memchr(text + i, '\n', len - i);
			size_t end = nl ? (size_t)(nl - text) + 1 : len;
			char *sp = memchr(text + i, ' ', end - i);
			int64_t sec, ns;

			/* An unended last line: whole only at the end (or cut,
			 * when it alone fills the read). */
			if (!nl && !(final && !full) &&
			    !(full && !took && o == 0 && i == 0))
				break;
			if (!sp || log_time(text + i, (size_t)(sp - (text + i)),
			                    &sec, &ns) < 0) {
				i = end; /* not the kubelet's: skipped */
				continue;
			}
			if (!took) {
				if (sec < csec || (sec == csec && ns < cnsec)) {
					i = end;
					continue;
				}
				if (sec == csec && ns == cnsec &&
				    same++ < csame) {
					i = end;
					continue;
				}
			}
			took = true;
			if (sec > csec || (sec == csec && ns > cnsec)) {
				csec = sec;
				cnsec = ns;
				csame = 1;
			} else if (sec == csec && ns == cnsec) {
				csame++;
			}
			memcpy(out + o, sp + 1, end - (size_t)(sp + 1 - text));
			o += end - (size_t)(sp + 1 - text);
			i = end;
			if (o >= RUN_LOG_CHUNK || i >= len) {
				if (!(ok = run_log_post(ks, p, out, o)))
					break;
				o = 0;
				p->log_sec = csec;
				p->log_nsec = cnsec;
				p->log_same = csame;
			}
		}
		if (ok && o && (ok = run_log_post(ks, p, out, o))) {
			p->log_sec = csec;
			p->log_nsec = cnsec;
			p->log_same = csame;
		}
		free(out);
		free(text);
		if (!ok || !full)
			return;
		/* A full read with nothing new: more than a read's worth of
		 * lines share the cursor's second; read more at once. */
		if (!took) {
			if (p->log_read >= RUN_LOG_READ_MAX)
				return;
			p->log_read *= 2;
		}
	}
}

/* Whether gang member @a can run as a pod: every member on a node of
 * ours (a pod reaches its peers through the cluster's network and DNS,
 * which an agent's node is not on).  0, or -EINVAL with @err. */
static int gang_check(struct cnl_kube_sched *ks,
                      const struct cnl_wire_assignment *a, char *err,
                      size_t errlen)
{
	if (a->gang.size < 2 || a->gang.n_nodes != a->gang.size ||
	    a->gang.rank < 0 || a->gang.rank >= a->gang.size) {
		cnl_seterr(err, errlen,
		           "its gang is not whole (rank %d of %d, %d nodes)",
		           a->gang.rank, a->gang.size, a->gang.n_nodes);
		return -EINVAL;
	}
	for (int i = 0; i < a->gang.n_nodes; i++) {
		bool ours = false;
		for (size_t k = 0; k < ks->n_nodes && !ours; k++)
			ours = !ks->nodes[k].gone &&
			       strcmp(ks->nodes[k].name, a->gang.nodes[i]) == 0;
		if (!ours) {
			cnl_seterr(err, errlen,
			           "its gang has rank %d on node %s, not a "
			           "Kubernetes node: a gang's pods reach each "
			           "other only inside the cluster",
			           i, a->gang.nodes[i]);
			return -EINVAL;
		}
	}
	return 0;
}

/* The headless Service of gang member @r, whose pod @p (uid @uid) was just
 * made: made, or one of an earlier pod of the member replaced.  0; -1 when
 * the job failed or is to be tried again (*@again), the pod deleted. */
static int run_gang_service(struct cnl_kube_sched *ks, int ni,
                            const struct cnl_wire_assignment *a, struct pod *p,
                            const struct cnl_kube_run *r, const char *uid,
                            bool *again)
{
	char path[512], name[160], err[512], why[512];
	json_t *o = cnl_kube_run_gang_service(r, uid), *old = NULL;
	long st;

	cnl_kube_gang_service_name(r->gang_id, r->gang_rank, name,
	                           sizeof(name));
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/services", r->ns);
	st = cnl_kube_call(ks->kc, "POST", path, o, NULL, NULL, err,
	                   sizeof(err));
	if (st == 409) {
		/* An earlier pod's (its owner went, the garbage collector
		 * has not yet taken it): replaced.  Anything else under the
		 * name would take the member's DNS name: not used. */
		char one[700];
		snprintf(one, sizeof(one), "%s/%s", path, name);
		if (cnl_kube_call(ks->kc, "GET", one, NULL, NULL, &old, err,
		                  sizeof(err)) == 200 &&
		    cnl_kube_gang_service_like(old, r)) {
			st = cnl_kube_call(ks->kc, "DELETE", one, NULL, NULL,
			                   NULL, err, sizeof(err));
			if (st == 200 || st == 404)
				st =
				    cnl_kube_call(ks->kc, "POST", path, o, NULL,
				                  NULL, err, sizeof(err));
			else
				st = -1; /* tried again */
		} else {
			st = 409;
		}
		json_decref(old);
	}
	json_decref(o);
	if (st == 201)
		return 0;
	snprintf(why, sizeof(why),
	         "namespace %s has a Service %s that CNLab did not make for "
	         "this gang",
	         r->ns, name);
	run_child_refused(ks, ni, a, p, st, "its gang's Service was refused",
	                  st == 409 ? why : NULL, err, again);
	return -1;
}

/* Run pod @p's collector's image as pod object @obj has it ("": none). */
static void run_collect_image(struct pod *p, const json_t *obj)
{
	const json_t *x;
	size_t i;

	p->collect_image[0] = '\0';
	json_array_foreach (
	    json_object_get(json_object_get(obj, "spec"), "initContainers"), i,
	    x)
		if (S(x, "name") && (strcmp(S(x, "name"), "collect") == 0 ||
		                     strcmp(S(x, "name"), "notebook") == 0))
			snprintf(p->collect_image, sizeof(p->collect_image),
			         "%s", S(x, "image") ?: "");
}

/* Make Secret @o (stolen, wiped: a token of pod @p's, NAME-@suffix) in
 * @p's namespace.  0, or -1 with the job failed (@what; a 409 is one of
 * that name that cnlabd may not read: a planted token is not this
 * @whose's to use), or *@again. */
static int token_secret_post(struct cnl_kube_sched *ks, int ni,
                             const struct cnl_wire_assignment *a, struct pod *p,
                             json_t *o, const char *suffix, const char *whose,
                             const char *what, bool *again)
{
	char path[512], err[512], why[512];
	long st;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", p->ns);
	st = cnl_kube_call(ks->kc, "POST", path, o, NULL, NULL, err,
	                   sizeof(err));
	cnl_json_wipe(o);
	json_decref(o);
	if (st == 201)
		return 0;
	snprintf(why, sizeof(why),
	         "namespace %s has a Secret %s-%s that CNLab did not make for "
	         "this %s",
	         p->ns, p->name, suffix, whose);
	run_child_refused(ks, ni, a, p, st, what, st == 409 ? why : NULL, err,
	                  again);
	return -1;
}

/* The Secret of run pod @p's collector, its token for this job and epoch
 * (and cnlabd's CA): after the pod, which owns it; the kubelet starts the
 * pod once it is there.  0, or -1 with the job failed (or *@again). */
static int run_collect_secret(struct cnl_kube_sched *ks, int ni,
                              const struct cnl_wire_assignment *a,
                              struct pod *p, const struct cnl_kube_run *run,
                              const char *uid, bool *again)
{
	char token[CNL_AUTH_COLLECT_MAX];
	json_t *o;

	if (cnl_auth_collect_token(ks->secret, ks->secret_len, a->id, a->epoch,
	                           token) < 0) {
		run_child_refused(ks, ni, a, p, 400,
		                  "its collector's token could not be made",
		                  NULL, "", again);
		return -1;
	}
	o = cnl_kube_run_collect_secret(run, uid, token, ks->collect_ca);
	explicit_bzero(token, sizeof(token));
	return token_secret_post(ks, ni, a, p, o, "collect", "run",
	                         "its collector's Secret was refused", again);
}

/* Server @a's workspace, the claim its pods mount: made once (10 GB
 * unless it asked), found again after.  One of the name that CNLab did not
 * make for this server (another label) fails the server.  0, or -1 with
 * the server failed (or *@again). */
static int server_workspace(struct cnl_kube_sched *ks, int ni,
                            const struct cnl_wire_assignment *a,
                            const struct cnl_kube_run *run, const char *ns,
                            bool *again)
{
	char path[512], err[512], pvc[160];
	json_t *o = cnl_kube_server_pvc(run), *have = NULL;
	long st;

	cnl_kube_server_pvc_name(a->id, pvc, sizeof(pvc));
	snprintf(path, sizeof(path),
	         "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, pvc);
	st = cnl_kube_call(ks->kc, "GET", path, NULL, NULL, &have, err,
	                   sizeof(err));
	if (st == 404) {
		snprintf(path, sizeof(path),
		         "/api/v1/namespaces/%s/persistentvolumeclaims", ns);
		st = cnl_kube_call(ks->kc, "POST", path, o, NULL, NULL, err,
		                   sizeof(err));
		if (st == 409) /* made meanwhile: looked at next time */
			st = -EIO;
	} else if (st == 200) {
		const char *lab =
		    S(json_object_get(json_object_get(have, "metadata"),
		                      "labels"),
		      "cnlab.io/server");
		if (!lab || strcmp(lab, a->id) != 0) {
			snprintf(err, sizeof(err),
			         "namespace %s has a PersistentVolumeClaim %s "
			         "that CNLab did not make for this server",
			         ns, pvc);
			st = 409;
		}
	}
	json_decref(o);
	json_decref(have);
	if (st == 200 || st == 201)
		return 0;
	if (st < 0 || st >= 500 || st == 429)
		*again = true;
	else if (st == 403 && strstr(err, "cannot"))
		run_fail(ks, ni, a,
		         "cnlabd may not make the server's workspace in "
		         "namespace %s (bind the ClusterRole "
		         "cnlab:cnlabd-workloads to the ServiceAccount "
		         "cnlab/cnlabd there)",
		         ns);
	else
		run_fail(ks, ni, a, "its workspace was refused: %s", err);
	return -1;
}

/* The Secret of server pod @p's access token: after the pod, which owns
 * it.  0, or -1 with the server failed (or *@again). */
static int server_secret(struct cnl_kube_sched *ks, int ni,
                         const struct cnl_wire_assignment *a, struct pod *p,
                         const struct cnl_kube_run *run, const char *uid,
                         bool *again)
{
	char token[33];
	json_t *o;

	server_token(ks, a->id, a->epoch, token);
	o = cnl_kube_run_server_secret(run, uid, token);
	explicit_bzero(token, sizeof(token));
	return token_secret_post(ks, ni, a, p, o, "server", "server",
	                         "its token's Secret was refused", again);
}

/* The pod of run job @a placed on node @ni: found (made by an earlier run
 * of ours), or made now with its claim and inputs.  NULL when there is
 * none yet (*@again: look at @a again) or the job cannot run here (it was
 * failed, saying why). */
static struct pod *run_pod(struct cnl_kube_sched *ks, int ni,
                           const struct cnl_wire_assignment *a, bool *again)
{
	char name[128], ns[64], pname[CNL_WIRE_NAME_MAX], err[512], path[512];
	struct pod *p = NULL;
	json_t *pod = NULL, *made = NULL, *posted = NULL, *o;
	struct run_secrets secs = {0};
	struct run_in in = {0};
	long st;
	int r;

	if (!ks->synced) { /* a pod of ours may be there: list first */
		*again = true;
		return NULL;
	}
	r = run_namespace(ks, a->project_id, ns, sizeof(ns), pname,
	                  sizeof(pname), err, sizeof(err));
	if (r == -EIO) {
		*again = true;
		return NULL;
	}
	cnl_kube_run_name(a->id, a->epoch, name, sizeof(name));
	for (size_t i = 0; r == 0 && i < ks->n_pods; i++) {
		struct pod *q = &ks->pods[i];
		const char *lab =
		    S(json_object_get(json_object_get(q->obj, "metadata"),
		                      "labels"),
		      "cnlab.io/job");
		if (!q->gone && q->st != P_DONE && strcmp(q->ns, ns) == 0 &&
		    strcmp(q->name, name) == 0 && lab &&
		    strcmp(lab, a->id) == 0)
			p = q;
	}
	if (p && !p->run && !run_proven(ks, p, a->id, a->epoch)) {
		/* Named like this run's pod, not made by cnlabd (a tenant's
		 * squatting it, to run under another's job): not taken. */
		cnl_log(CNL_LOG_WARN,
		        "kube: a pod named like a run's is not ours",
		        "pod=%s/%s job=%s", p->ns, p->name, a->id);
		if (a->action == CNL_WIRE_RUN) {
			run_fail(ks, ni, a,
			         "namespace %s has a pod %s that CNLab did not "
			         "make for this run",
			         ns, name);
		} else { /* a stop: nothing of ours runs it */
			struct pod tmp = {.node = ni, .epoch = a->epoch};
			snprintf(tmp.job, sizeof(tmp.job), "%s", a->id);
			report(ks, &tmp, CNL_WIRE_REPORT_STOPPED, 0,
			       "had no pod of cnlabd's");
		}
		return NULL;
	}
	if (p) { /* ours, from before a restart */
		if (!p->run) {
			p->run = true;
			/* Its image as found (a change while cnlabd was away
			 * is not seen; one from now on is). */
			snprintf(p->image, sizeof(p->image), "%s",
			         S(json_array_get(
			               json_object_get(
			                   json_object_get(p->obj, "spec"),
			                   "containers"),
			               0),
			           "image")
			             ?: "");
			run_collect_image(p, p->obj);
			p->server = a->kind == CNL_WIRE_SERVER;
			p->node = ni;
			p->epoch = a->epoch;
			snprintf(p->claim, sizeof(p->claim), "%s-gpu", name);
			snprintf(p->request, sizeof(p->request), "gpu");
			if (!json_object_get(json_object_get(p->obj, "spec"),
			                     "resourceClaims"))
				p->claim[0] = '\0';
			track_job(ks, p, a->id);
			p->st = P_SUBMITTED;
		}
		return p;
	}
	if (a->action != CNL_WIRE_RUN) {
		struct pod tmp = {.node = ni, .epoch = a->epoch};
		snprintf(tmp.job, sizeof(tmp.job), "%s", a->id);
		report(ks, &tmp, CNL_WIRE_REPORT_STOPPED, 0, "had no pod");
		return NULL;
	}
	if (r < 0) {
		run_fail(ks, ni, a, "%s", err);
		return NULL;
	}
	if (a->has_gang && gang_check(ks, a, err, sizeof(err)) < 0) {
		run_fail(ks, ni, a, "%s", err);
		return NULL;
	}
	if (!ks->has_proof_key) { /* its pod could not be known again */
		run_fail(ks, ni, a,
		         "cnlabd has no secret to prove its pods with");
		return NULL;
	}
	/* A server's inputs are its workspace's: none to copy. */
	r = a->kind == CNL_WIRE_SERVER
	        ? 0
	        : run_inputs(ks, ni, a, &in, err, sizeof(err));
	if (r == -EIO) {
		*again = true;
		return NULL;
	}
	if (r < 0) {
		run_fail(ks, ni, a, "%s", err);
		return NULL;
	}
	/* Last before its pod: fetching them is their audited use. */
	if (a->secrets > 0) {
		r = run_secrets(ks, ni, a, &secs, err, sizeof(err));
		if (r == -EIO)
			*again = true;
		else if (r < 0)
			run_fail(ks, ni, a, "%s", err);
		if (r < 0)
			goto out;
	}
	/* The job's CNLab image, as the kubelet pulls it: from the
	 * registry CNLab's images are pushed to, pinned to the digest CNLab
	 * has (a tag there cannot point elsewhere); without a registry set,
	 * its name as an OCI reference. */
	char ref[RUN_IMAGE_MAX];
	if (run_image(ks, a, ref, sizeof(ref)) < 0) {
		run_fail(ks, ni, a, "its image %s was deleted from CNLab",
		         a->image);
		goto out;
	}
	struct cnl_kube_run run = {
	    .job = a->id,
	    .project = pname,
	    .shape = a->shape[0] ? a->shape : "cpu",
	    .image = ref,
	    .command = a->command,
	    .user = a->user,
	    .epoch = a->epoch,
	    .cpu_milli = a->cpu_milli,
	    .mem_mib = a->mem_mib,
	    .inputs = (const char *const *)in.paths,
	    .input_sums = (const char *const *)in.sums,
	    .n_inputs = in.n,
	    .n_input_maps = json_array_size(in.maps),
	    .secrets = (const char *const *)secs.name,
	    .env = (const char *const *)secs.env,
	    .n_secrets = secs.n,
	    .ns = ns,
	    .collect_image = ks->collect_image[0] ? ks->collect_image : NULL,
	    .collect_url = ks->collect_url[0] ? ks->collect_url : NULL,
	    .server = a->kind == CNL_WIRE_SERVER,
	    .storage_gb = a->storage_gb,
	    .idle_timeout_s = a->idle_timeout_s,
	    .notebook_image = ks->collect_image[0] ? ks->collect_image : NULL,
	    .user_namespaces = ks->cfg.user_namespaces,
	};
	/* A server's workspace first: its pod mounts it. */
	if (run.server && server_workspace(ks, ni, a, &run, ns, again) < 0)
		goto out;
	const char *gnodes[CNL_WIRE_GANG_MAX];
	if (a->has_gang) {
		for (int i = 0; i < a->gang.n_nodes; i++)
			gnodes[i] = a->gang.nodes[i];
		run.gang_id = a->gang.id;
		run.gang_rank = a->gang.rank;
		run.gang_size = a->gang.size;
		run.gang_nodes = gnodes;
	}
	if (cnl_kube_run_pod(&run, &pod, err, sizeof(err)) < 0) {
		run_fail(ks, ni, a, "%s", err);
		goto out;
	}
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
	st = cnl_kube_call(ks->kc, "POST", path, pod, NULL, &made, err,
	                   sizeof(err));
	char uid[64];
	snprintf(uid, sizeof(uid), "%s",
	         S(json_object_get(made, "metadata"), "uid") ?: "");
	if (st != 201 || !uid[0]) {
		/* 403 is RBAC's, or an admission's (Pod Security, a
		 * ResourceQuota): the first gets the hint. */
		if (st == 403 && strstr(err, "cannot create resource"))
			run_fail(ks, ni, a,
			         "cnlabd may not make pods in namespace %s "
			         "(bind the ClusterRole cnlab:cnlabd-workloads "
			         "to the ServiceAccount cnlab/cnlabd there)",
			         ns);
		else if (st == 409 && run_unproven_mine(ks, a, ns, name))
			*again = true; /* ours, its reply lost: made again */
		else if (st == 409)
			run_fail(ks, ni, a,
			         "namespace %s has a pod %s that CNLab did "
			         "not make for this run",
			         ns, name);
		else if (st > 0 && st < 500 && st != 429)
			run_fail(ks, ni, a, "its pod was refused: %s", err);
		else
			*again = true;
		goto out;
	}
	/* An API server without user namespaces (UserNamespacesSupport
	 * off) drops hostUsers: said once, not taken for isolation. */
	if (run.user_namespaces &&
	    !json_is_false(
	        json_object_get(json_object_get(made, "spec"), "hostUsers")) &&
	    !atomic_exchange(&ks->userns_warned, true))
		cnl_log(CNL_LOG_WARN,
		        "kube: the API server dropped hostUsers: false; pods "
		        "share their node's user namespace (as uid 1000, never "
		        "root)",
		        "pod=%s/%s fix=\"enable UserNamespacesSupport, or set "
		        "kube_user_namespaces false\"",
		        ns, name);
	/* Its proof, now that it has its uid. */
	{
		char proof[65];
		json_t *patch, *patched = NULL;
		run_proof(ks, uid, a->id, a->epoch, ns, name, proof);
		patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
		                  PROOF_ANN, proof);
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s",
		         ns, name);
		st = proof[0] ? cnl_kube_call(ks->kc, "PATCH", path, patch,
		                              "application/merge-patch+json",
		                              &patched, err, sizeof(err))
		              : 200;
		json_decref(patch);
		if (st == 200 && patched) {
			posted = made; /* as it was made */
			made = patched;
		} else {
			json_decref(patched);
		}
		if (st != 200) {
			struct pod tmp = {0};
			snprintf(tmp.ns, sizeof(tmp.ns), "%s", ns);
			snprintf(tmp.name, sizeof(tmp.name), "%s", name);
			run_delete(ks, &tmp, 0);
			*again = true;
			goto out;
		}
	}
	pod_seen(ks, made, false);
	if (!(p = pod_of_uid(ks, uid)))
		goto out;
	p->run = true;
	p->node = ni;
	p->epoch = a->epoch;
	/* As the API server stored it when it made it (an admission may
	 * rewrite images to a mirror): a later change is what is refused,
	 * one that raced the proof's patch too. */
	const json_t *base = posted ? posted : p->obj;
	snprintf(p->image, sizeof(p->image), "%s",
	         S(json_array_get(json_object_get(json_object_get(base, "spec"),
	                                          "containers"),
	                          0),
	           "image")
	             ?: ref);
	run_collect_image(p, base);
	p->server = run.server;
	snprintf(p->request, sizeof(p->request), "gpu");
	track_job(ks, p, a->id);
	p->st = P_SUBMITTED;
	if ((o = cnl_kube_run_claim(&run, uid))) {
		json_t *c = NULL;
		snprintf(p->claim, sizeof(p->claim), "%s-gpu", name);
		snprintf(
		    path, sizeof(path),
		    "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims",
		    ns);
		st = cnl_kube_call(ks->kc, "POST", path, o, NULL, &c, err,
		                   sizeof(err));
		json_decref(o);
		if (st == 409) { /* ours, if the reply to its making was lost */
			json_decref(c);
			c = run_owned(ks, ns, "resource.k8s.io/v1",
			              "resourceclaims", p->claim, uid);
		}
		if (st == 201) {
			json_decref(p->claim_obj);
			p->claim_obj = c;
		} else if (st == 409 && c) {
			/* Ours: the reply to its making was lost. */
			json_decref(p->claim_obj);
			p->claim_obj = c;
		} else {
			/* A claim of that name made by someone else (409)
			 * would carry this job's slice: not taken. */
			json_decref(c);
			run_child_refused(ks, ni, a, p, st,
			                  "its claim was refused", NULL, err,
			                  again);
			p = NULL;
			goto out;
		}
	}
	/* Each ConfigMap of its inputs; one of that name already there is
	 * taken only if the pod owns it (the reply to its making was
	 * lost).  A planted one that copies the owner still fails the pod:
	 * its init container checks each input's SHA-256. */
	for (size_t m = 0; m < json_array_size(in.maps); m++) {
		char cmname[192];
		cnl_kube_run_inputs_name(&run, m, cmname, sizeof(cmname));
		o = cnl_kube_run_inputs(
		    &run, uid, m, json_incref(json_array_get(in.maps, m)));
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps",
		         ns);
		st = cnl_kube_call(ks->kc, "POST", path, o, NULL, NULL, err,
		                   sizeof(err));
		json_decref(o);
		json_t *cm = st == 409 ? run_owned(ks, ns, NULL, "configmaps",
		                                   cmname, uid)
		                       : NULL;
		json_decref(cm);
		if (st != 201 && !cm) { /* 409: someone else's inputs */
			run_child_refused(ks, ni, a, p, st,
			                  "its inputs were refused", NULL, err,
			                  again);
			p = NULL;
			goto out;
		}
	}
	if (secs.n) {
		/* After the pod (its owner, so that its deletion takes
		 * them): the kubelet starts the pod once they are there. */
		o = cnl_kube_run_secret(&run, uid, secs.data);
		secs.data = NULL;
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets",
		         ns);
		st = cnl_kube_call(ks->kc, "POST", path, o, NULL, NULL, err,
		                   sizeof(err));
		cnl_json_wipe(o); /* the values, before they are freed */
		json_decref(o);
		if (st != 201) {
			/* 409: a Secret of its name that cnlabd may not read
			 * (it only makes them): not this run's to use. */
			char why[512];
			snprintf(why, sizeof(why),
			         "namespace %s has a Secret %s-secrets that "
			         "CNLab did not make for this run",
			         ns, name);
			run_child_refused(ks, ni, a, p, st,
			                  "its secrets were refused",
			                  st == 409 ? why : NULL, err, again);
			p = NULL;
			goto out;
		}
	}
	if (run.collect_image && !run.server &&
	    run_collect_secret(ks, ni, a, p, &run, uid, again) < 0) {
		p = NULL;
		goto out;
	}
	if (run.server && server_secret(ks, ni, a, p, &run, uid, again) < 0) {
		p = NULL;
		goto out;
	}
	if (run.gang_size > 1 &&
	    run_gang_service(ks, ni, a, p, &run, uid, again) < 0) {
		p = NULL;
		goto out;
	}
	cnl_log(CNL_LOG_INFO, "kube: a run job became a pod",
	        "job=%s pod=%s/%s", a->id, ns, name);
out:
	run_secrets_done(&secs);
	run_in_done(&in);
	json_decref(pod);
	json_decref(made);
	json_decref(posted);
	return p;
}

/* The work CNLab placed on node @ni. */
static void assignments(struct cnl_kube_sched *ks, int ni, int64_t now)
{
	struct node *n = &ks->nodes[ni];
	struct cnl_wire_assignments as = {0};
	char path[256], err[256];
	json_t *o = NULL;

	snprintf(path, sizeof(path), "/v1/nodes/%s/assignments?since=%" PRIu64,
	         n->id, n->version);
	ks->as = n->cred;
	long st = cnl_client_call(ks->nodecl, "GET", path, NULL, 0, &o, err,
	                          sizeof(err));
	if (st != 200 ||
	    cnl_wire_assignments_decode(o, &as, err, sizeof(err)) < 0) {
		json_decref(o);
		return;
	}
	json_decref(o);
	if (as.version == n->version) {
		cnl_wire_assignments_done(&as);
		return;
	}
	bool again = false;
	for (size_t i = 0; i < as.n; i++) {
		const struct cnl_wire_assignment *a = &as.items[i];
		struct pod *p = pod_of_job(ks, a->id);

		/* A pod's job: submitted by the service user, not just
		 * named like one (anyone may run "kubernetes pod ..."). */
		if (!p && strcmp(a->user, USER) == 0 &&
		    strncmp(a->command, POD_CMD, strlen(POD_CMD)) == 0) {
			/* A pod's job (a restart: its pod is not matched to
			 * it yet); once the pods are listed and its pod is
			 * not among them, it went while we were away. */
			struct pod *q =
			    ks->synced
			        ? pod_named(ks, a->command + strlen(POD_CMD))
			        : NULL;
			struct pod tmp = {.node = ni, .epoch = a->epoch};
			int code;

			if (!ks->synced || (q && q->st != P_DONE) ||
			    cr_waits(ks, a->id)) {
				again = true;
				continue;
			}
			snprintf(tmp.job, sizeof(tmp.job), "%s", a->id);
			if (q && pod_ended(q, &code)) { /* ended meanwhile */
				report(ks, &tmp,
				       code ? CNL_WIRE_REPORT_FAILED
				            : CNL_WIRE_REPORT_SUCCEEDED,
				       code, NULL);
				continue;
			}
			report(ks, &tmp, CNL_WIRE_REPORT_STOPPED, 0,
			       "its pod is gone");
			cancel_job(ks, a->id);
			continue;
		}
		/* The job placed anew (its node was lost, CNLab requeued it)
		 * while its pod of the earlier placement is still bound: a
		 * run job gets a new pod; a pod cannot follow its job to
		 * another node, so that job ends. */
		if (p && a->action == CNL_WIRE_RUN && p->st == P_BOUND &&
		    (p->node != ni || p->epoch != a->epoch)) {
			if (p->run) {
				run_delete(ks, p, 30);
				forget(ks, p);
				p = NULL;
			} else {
				struct pod tmp = {.node = ni,
				                  .epoch = a->epoch};
				snprintf(tmp.job, sizeof(tmp.job), "%s", a->id);
				report(ks, &tmp, CNL_WIRE_REPORT_STOPPED, 0,
				       "its pod is bound to another node");
				cancel_job(ks, a->id);
				continue;
			}
		}
		/* Work that is no pod's (submitted with the CLI): a pod we
		 * make for it. */
		if (!p && !(p = run_pod(ks, ni, a, &again)))
			continue;
		if (a->action == CNL_WIRE_STOP) {
			if (p->st == P_BOUND && !p->evicting) {
				int64_t g =
				    a->kill_ms > a->signal_ms
				        ? (a->kill_ms - a->signal_ms) / 1000
				        : 30;
				evict(ks, p, now, g);
			} else if (p->st == P_SUBMITTED) {
				struct pod tmp = *p;
				tmp.node = ni;
				tmp.epoch = a->epoch;
				report(ks, &tmp, CNL_WIRE_REPORT_STOPPED, 0,
				       "never bound");
				if (p->run) {
					run_delete(ks, p, 0);
					forget(ks, p);
				}
			}
			continue;
		}
		if (p->st != P_SUBMITTED)
			continue;
		p->node = ni;
		p->epoch = a->epoch;
		if (p->run && run_tampered(p)) {
			report(ks, p, CNL_WIRE_REPORT_FAILED, 1, TAMPERED);
			run_delete(ks, p, 1);
			forget(ks, p);
			continue;
		}
		/* Its node as last listed still takes it (labels and taints
		 * may have changed since its job was submitted). */
		char why[256] = "";
		const json_t *kn = knode(ks, n->name);
		const json_t *pl = p->run ? NULL : pod_placed(ks, p);
		struct cnl_kube_spread *sp =
		    pl ? cnl_kube_spread_new(p->obj, ks->knodes, pl, false)
		       : NULL;
		int r = !p->run && kn &&
		                (!cnl_kube_node_fits(p->obj, kn, why,
		                                     sizeof(why)) ||
		                 (pl && !cnl_kube_pod_affinity_fits(
		                            p->obj, n->name, ks->knodes, pl,
		                            why, sizeof(why))) ||
		                 !cnl_kube_spread_fits(sp, n->name, why,
		                                       sizeof(why)))
		            ? -EPERM
		            : allocate(ks, p, n, a);
		cnl_kube_spread_free(sp);
		if (r == 0)
			r = bind_pod(ks, p, n);
		if (r == -EIO) { /* the API server: try again */
			p->node = -1;
			again = true;
			continue;
		}
		if (r < 0) {
			/* Its claim is another pod's, or the pod is bound
			 * elsewhere: this job fails, saying so, and the pod
			 * waits as a new one. */
			if (r == -EPERM) {
				char m[400];
				snprintf(
				    m, sizeof(m),
				    "node %s no longer takes the pod (%s); "
				    "it waits as a new job",
				    n->name, why);
				report(ks, p, CNL_WIRE_REPORT_FAILED, 1, m);
			} else {
				report(ks, p, CNL_WIRE_REPORT_FAILED, 1,
				       "cannot bind the pod: its claim or the "
				       "pod is taken");
			}
			if (p->run) {
				run_delete(ks, p, 0);
				forget(ks, p);
				continue;
			}
			json_object_del(ks->by_job, p->job);
			p->job[0] = '\0';
			p->node = -1;
			/* A node that no longer takes it (its rules met a
			 * pod placed meanwhile: siblings of one topology
			 * spread or anti-affinity placed in one cycle) is not
			 * a failure to bind: it waits again, as often as that
			 * happens, with nodes looked at anew. */
			p->attempt++;
			if (r != -EPERM)
				p->bind_fails++;
			p->st =
			    p->bind_fails < MAX_ATTEMPTS ? P_NEW : P_REFUSED;
			p->retry_at =
			    now + (p->st == P_NEW ? 1000 : REFUSE_RETRY_MS);
			if (p->st == P_REFUSED)
				say(ks, p, "Unschedulable",
				    "cnlab: could not bind it %d times: its "
				    "claim "
				    "or the pod is taken",
				    p->bind_fails);
			continue;
		}
		p->st = P_BOUND;
		p->said[0] = '\0';
		/* A server runs once it has an address (step_pod). */
		if (!p->server)
			report(ks, p, CNL_WIRE_REPORT_RUNNING, 0, NULL);
		tj_news(ks, p, "Running", n->name, -256, NULL);
	}
	if (!again)
		n->version = as.version;
	cnl_wire_assignments_done(&as);
}

/* ---- nodes --------------------------------------------------------------- */

static void workspace_drop(struct cnl_kube_sched *ks, const char *id);

static void heartbeat(struct cnl_kube_sched *ks, int ni, int64_t now)
{
	struct node *n = &ks->nodes[ni];
	struct cnl_wire_heartbeat hb = {0};
	struct cnl_wire_node out = {0};
	char path[256], err[256];
	json_t *body, *o = NULL;
	size_t k = 0;

	hb.has_running = true;
	hb.running = cnl_xcalloc(ks->n_pods + 1, sizeof(*hb.running));
	for (size_t i = 0; i < ks->n_pods; i++) {
		const struct pod *p = &ks->pods[i];
		if (p->st == P_BOUND && p->node == ni) {
			snprintf(hb.running[k].id, sizeof(hb.running[k].id),
			         "%s", p->job);
			hb.running[k++].epoch = p->epoch;
		}
	}
	hb.n_running = k;
	/* The servers' workspaces, which no node keeps here: said by the
	 * first node that beats, for all (none runs now: a running
	 * server's is not said). */
	size_t first = 0;
	while (first < ks->n_nodes && ks->nodes[first].gone)
		first++;
	if ((size_t)ni == first && json_object_size(ks->workspaces)) {
		const char *id;
		json_t *v;
		size_t nv = 0;

		hb.has_volumes = true;
		hb.volumes = cnl_xcalloc(json_object_size(ks->workspaces),
		                         sizeof(*hb.volumes));
		json_object_foreach (ks->workspaces, id, v)
			if (!pod_of_job(ks, id))
				snprintf(hb.volumes[nv++],
				         sizeof(hb.volumes[0]), "%s", id);
		hb.n_volumes = nv;
	}
	hb.has_others = n->others_known;
	hb.others_cpu_milli = n->others_cpu;
	hb.others_mem_mib = n->others_mem;
	hb.has_pods = n->others_known && n->pods_max > 0;
	hb.pods_max = n->pods_max;
	hb.others_pods = n->others_pods;
	body = cnl_wire_heartbeat_encode(&hb);
	cnl_wire_heartbeat_done(&hb);
	snprintf(path, sizeof(path), "/v1/nodes/%s/heartbeat", n->id);
	ks->as = n->cred;
	long st = cnl_client_call(ks->nodecl, "POST", path, body, 0, &o, err,
	                          sizeof(err));
	json_decref(body);
	n->next_hb = now + (n->heartbeat_ms ? n->heartbeat_ms : 5000);
	if (st == 200 && cnl_wire_node_decode(o, &out, err, sizeof(err)) == 0) {
		if (out.heartbeat_ms > 0)
			n->heartbeat_ms = out.heartbeat_ms;
		for (size_t i = 0; i < out.n_stop; i++) {
			struct pod *p = pod_of_job(ks, out.stop[i]);
			if (p && p->st == P_BOUND && !p->evicting)
				evict(ks, p, now, 30);
		}
		for (size_t i = 0; i < out.n_drop; i++)
			if (!pod_of_job(ks, out.drop[i]))
				workspace_drop(ks, out.drop[i]);
	} else {
		cnl_log(CNL_LOG_WARN, "kube: heartbeat not taken",
		        "node=%s err=\"%s\"", n->name, err);
	}
	cnl_wire_node_done(&out);
	json_decref(o);
}

static int node_add(struct cnl_kube_sched *ks,
                    const struct cnl_wire_register *m)
{
	char cred[CNL_API_NODE_SECRET_MAX], err[256];
	struct cnl_wire_node out = {0};
	struct node n = {0};
	json_t *body, *o = NULL;
	int r;

	if ((r = cnl_api_node_mint(ks->cfg.api, m->name, cred)) < 0) {
		/* Said once per node (tried again at each sync). */
		if (!json_object_get(ks->refused_nodes, m->name))
			cnl_log(
			    CNL_LOG_WARN, "kube: cannot mint a node credential",
			    "node=%s err=%s%s", m->name, cnl_strerror(r),
			    r == -EEXIST ? " why=\"an agent registered this "
			                   "node; it stays the agent's\""
			                 : "");
		json_object_set_new(ks->refused_nodes, m->name, json_true());
		return r;
	}
	json_object_del(ks->refused_nodes, m->name);
	memcpy(n.cred, cred, sizeof(n.cred));
	explicit_bzero(cred, sizeof(cred));
	body = cnl_wire_register_encode(m);
	ks->as = n.cred;
	long st = cnl_client_call(ks->nodecl, "POST", "/v1/nodes", body, 0, &o,
	                          err, sizeof(err));
	json_decref(body);
	if ((st != 200 && st != 201) ||
	    cnl_wire_node_decode(o, &out, err, sizeof(err)) < 0) {
		cnl_log(CNL_LOG_WARN, "kube: node not registered",
		        "node=%s err=\"%s\"", m->name, err);
		json_decref(o);
		cnl_wire_node_done(&out);
		explicit_bzero(&n, sizeof(n));
		return -EIO;
	}
	json_decref(o);
	snprintf(n.name, sizeof(n.name), "%s", m->name);
	snprintf(n.id, sizeof(n.id), "%s", out.id);
	n.heartbeat_ms = out.heartbeat_ms;
	cnl_wire_node_done(&out);
	ks->nodes =
	    cnl_xrealloc(ks->nodes, (ks->n_nodes + 1) * sizeof(*ks->nodes));
	ks->nodes[ks->n_nodes++] = n;
	cnl_log(CNL_LOG_INFO, "kube: node registered",
	        "node=%s id=%s gpus=%d type=%s", m->name, n.id, m->gpus,
	        m->gpu_type);
	return 0;
}

/* The jobs of pods still waiting, looked at once per sync: one cancelled
 * (`cnlab jobs cancel`) evicts its pod; one that ended otherwise before
 * it was placed (its deadline missed) is said on the pod, which waits as
 * a new job after REFUSE_RETRY_MS. */
/* Run pods that nothing takes any more (their delete failed, or their
 * job ended or moved to another pod while cnlabd was away): deleted, if
 * cnlabd made them. */
static void run_orphans(struct cnl_kube_sched *ks, int64_t now)
{
	long resync = ks->cfg.resync_ms > 0 ? ks->cfg.resync_ms : 10000;

	for (size_t i = 0; i < ks->n_pods && !atomic_load(&ks->stop); i++) {
		struct pod *p = &ks->pods[i];
		const json_t *lab = json_object_get(
		    json_object_get(p->obj, "metadata"), "labels");
		const char *job = S(lab, "cnlab.io/job");
		const char *ep = S(lab, "cnlab.io/epoch");
		char path[256], err[256];
		json_t *o = NULL;

		if (p->gone)
			continue;
		if (p->run && p->st == P_DONE) { /* its delete failed */
			run_delete(ks, p, 1);
			continue;
		}
		if (p->st != P_NEW || !job || !ep || !ks->synced ||
		    now - p->seen_at < 2 * resync ||
		    !run_proven(ks, p, job, strtoll(ep, NULL, 10)))
			continue;
		struct pod *cur = pod_of_job(ks, job);
		snprintf(path, sizeof(path), "/v1/jobs/%s", job);
		long st = cnl_client_call(ks->user, "GET", path, NULL, 0, &o,
		                          err, sizeof(err));
		const char *state = S(o, "state");
		if ((cur && cur != p) || st == 404 ||
		    (st == 200 && state && strcmp(state, "pending") != 0 &&
		     strcmp(state, "running") != 0)) {
			cnl_log(CNL_LOG_INFO, "kube: a run pod nothing takes",
			        "pod=%s/%s job=%s", p->ns, p->name, job);
			run_delete(ks, p, 1);
			p->st = P_DONE;
		}
		json_decref(o);
	}
}

/* A waiting pod's nodes as they are now (labels, taints, cordons and
 * nodes changed since its job was submitted): other than its job's, the
 * job is cancelled and the pod submitted again at once, as a new job. */
static void renodes(struct cnl_kube_sched *ks, struct pod *p, int64_t now)
{
	json_t *where = NULL;
	char err[512];
	int r;

	if (p->run)
		return; /* cnlabd's own pods: CNLab's nodes */
	r = pod_nodes(ks, p, &where, NULL, err, sizeof(err));
	if (r == 0 && (where && p->where ? json_equal(where, p->where)
	                                 : !where && !p->where)) {
		json_decref(where);
		return;
	}
	json_decref(where);
	cnl_log(CNL_LOG_INFO,
	        "kube: the nodes a waiting pod may use changed; its job is "
	        "submitted again",
	        "pod=%s/%s job=%s", p->ns, p->name, p->job);
	cancel_job(ks, p->job);
	json_object_del(ks->by_job, p->job);
	p->job[0] = '\0';
	p->attempt++;
	p->st = P_NEW;
	p->retry_at = now;
}

static void waiting_jobs(struct cnl_kube_sched *ks, int64_t now)
{
	run_orphans(ks, now);
	for (size_t i = 0; i < ks->n_pods && !atomic_load(&ks->stop); i++) {
		struct pod *p = &ks->pods[i];
		char path[256], err[256];
		json_t *o = NULL;
		const char *state;

		if (p->st != P_SUBMITTED)
			continue;
		snprintf(path, sizeof(path), "/v1/jobs/%s", p->job);
		if (cnl_client_call(ks->user, "GET", path, NULL, 0, &o, err,
		                    sizeof(err)) != 200 ||
		    !(state = S(o, "state")) || strcmp(state, "running") == 0) {
			json_decref(o);
			continue;
		}
		if (strcmp(state, "pending") == 0) {
			json_decref(o);
			renodes(ks, p, now);
			continue;
		}
		if (p->run) { /* its job ended before its pod was bound */
			run_delete(ks, p, 0);
			forget(ks, p);
		} else if (strcmp(state, "cancelled") == 0) {
			evict(ks, p, now, 0);
			tj_news(ks, p, "Cancelled", "", -256,
			        "its job was cancelled before it was placed");
			forget(ks, p);
		} else {
			json_object_del(ks->by_job, p->job);
			say(ks, p, "Unschedulable", "cnlab: job %s %s: %s",
			    p->job, state,
			    S(o, "message") ? S(o, "message") : "ended");
			p->job[0] = '\0';
			p->attempt++;
			p->st = P_REFUSED;
			p->retry_at = now + REFUSE_RETRY_MS;
		}
		json_decref(o);
	}
}

/* What the pods on our nodes that CNLab did not place hold there: the
 * pods of other schedulers, and ours whose job CNLab let go while the
 * kubelet still runs them.  CNLab counts it as used, so that it binds no
 * pod there that the kubelet would refuse for want of CPU or memory; and
 * how many pods of those it runs, against its allocatable pods. */
static void others(struct cnl_kube_sched *ks)
{
	json_t *list = NULL, *x;
	char err[512];
	size_t i;

	if (!ks->synced)
		return; /* which are ours is not known yet */
	if (cnl_kube_call(ks->kc, "GET", ASSIGNED, NULL, NULL, &list, err,
	                  sizeof(err)) != 200) {
		cnl_log(CNL_LOG_WARN, "kube: cannot list the pods on nodes",
		        "err=\"%s\"", err);
		json_decref(list);
		return; /* the last counts stand */
	}
	/* Kept for inter-pod affinity (pod_placed()). */
	json_decref(ks->assigned);
	ks->assigned = json_incref(list);
	json_decref(ks->placed);
	ks->placed = NULL;
	ks->any_anti = false;
	json_array_foreach (json_object_get(list, "items"), i, x)
		ks->any_anti |= reads_others(x);
	for (size_t k = 0; k < ks->n_pods; k++)
		ks->any_anti |=
		    !ks->pods[k].gone && reads_others(ks->pods[k].obj);
	for (size_t k = 0; k < ks->n_nodes; k++) {
		struct node *n = &ks->nodes[k];
		const char *pm =
		    S(json_object_get(
		          json_object_get(knode(ks, n->name), "status"),
		          "allocatable"),
		      "pods");
		char *end = NULL;
		long long v = pm ? strtoll(pm, &end, 10) : 0;

		n->others_cpu = n->others_mem = n->others_pods = 0;
		n->others_known = true;
		/* A count ("110"); anything else is no limit, said. */
		n->pods_max =
		    pm && end != pm && !*end && v > 0 && v <= 1000000 ? v : 0;
		if (pm && !n->pods_max)
			cnl_log(CNL_LOG_WARN,
			        "kube: a node's allocatable pods is not a "
			        "count; taken as no limit",
			        "node=%s pods=\"%s\"", n->name, pm);
	}
	json_array_foreach (json_object_get(list, "items"), i, x) {
		const char *on = S(json_object_get(x, "spec"), "nodeName");
		const char *uid = S(json_object_get(x, "metadata"), "uid");
		const struct pod *p = uid ? pod_of_uid(ks, uid) : NULL;
		int64_t cpu, mem;

		/* CNLab's own, in its job (or being taken again after a
		 * restart: P_NEW). */
		if (!on || (p && p->st != P_DONE && !p->gone))
			continue;
		for (size_t k = 0; k < ks->n_nodes; k++) {
			struct node *n = &ks->nodes[k];
			if (strcmp(n->name, on) != 0)
				continue;
			n->others_pods++;
			if (cnl_kube_pod_requests(x, &cpu, &mem) < 0) {
				/* Unreadable (the API server checks them):
				 * counted as nothing, said. */
				cnl_log(
				    CNL_LOG_WARN,
				    "kube: a pod's requests are not "
				    "quantities",
				    "pod=%s/%s",
				    S(json_object_get(x, "metadata"),
				      "namespace"),
				    S(json_object_get(x, "metadata"), "name"));
				break;
			}
			/* Bounded: the node protocol takes up to a
			 * quarter of INT64_MAX. */
			n->others_cpu = cpu > INT64_MAX / 8 - n->others_cpu
			                    ? INT64_MAX / 8
			                    : n->others_cpu + cpu;
			n->others_mem = mem > INT64_MAX / 8 - n->others_mem
			                    ? INT64_MAX / 8
			                    : n->others_mem + mem;
			break;
		}
	}
	json_decref(list);
}

/* What of node @n places pods: its labels, taints and cordon (new). */
static json_t *node_marks(const json_t *n)
{
	const json_t *spec = json_object_get(n, "spec");

	return json_pack(
	    "{s:O?,s:O?,s:O?}", "labels",
	    json_object_get(json_object_get(n, "metadata"), "labels"), "taints",
	    json_object_get(spec, "taints"), "unschedulable",
	    json_object_get(spec, "unschedulable"));
}

/* List nodes and our slices; register the nodes not yet known. */
/* The servers' workspace claims of every namespace (cnlab.io/server). */
static void workspaces(struct cnl_kube_sched *ks)
{
	json_t *list = NULL, *x;
	char err[512];
	size_t i;

	if (cnl_kube_call(ks->kc, "GET",
	                  "/api/v1/persistentvolumeclaims?labelSelector="
	                  "cnlab.io%2Fserver",
	                  NULL, NULL, &list, err, sizeof(err)) != 200) {
		cnl_log(CNL_LOG_WARN, "kube: cannot list workspace claims",
		        "err=\"%s\"", err);
		json_decref(list);
		return;
	}
	json_object_clear(ks->workspaces);
	json_array_foreach (json_object_get(list, "items"), i, x) {
		const json_t *md = json_object_get(x, "metadata");
		const char *id =
		    S(json_object_get(md, "labels"), "cnlab.io/server");
		const char *ns = S(md, "namespace"), *name = S(md, "name");
		char want[160];

		if (!id || !ns || !name || strlen(id) >= CNL_WIRE_ID_MAX)
			continue;
		/* Only a claim named as CNLab names this server's. */
		cnl_kube_server_pvc_name(id, want, sizeof(want));
		if (strcmp(want, name) == 0)
			json_object_set_new(ks->workspaces, id,
			                    json_string(ns));
	}
	json_decref(list);
}

/* cnlabd answered that server @id was deleted: its workspace goes. */
static void workspace_drop(struct cnl_kube_sched *ks, const char *id)
{
	const char *ns = json_string_value(json_object_get(ks->workspaces, id));
	char path[512], pvc[160], err[512];
	long st;

	if (!ns)
		return;
	cnl_kube_server_pvc_name(id, pvc, sizeof(pvc));
	snprintf(path, sizeof(path),
	         "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, pvc);
	st = cnl_kube_call(ks->kc, "DELETE", path, NULL, NULL, NULL, err,
	                   sizeof(err));
	if (st == 200 || st == 202 || st == 404) {
		cnl_log(CNL_LOG_INFO, "kube: a deleted server's workspace goes",
		        "server=%s claim=%s/%s", id, ns, pvc);
		json_object_del(ks->workspaces, id);
	} else {
		cnl_log(CNL_LOG_WARN,
		        "kube: cannot delete a deleted server's workspace",
		        "server=%s err=\"%s\"", id, err);
	}
}

static void sync_nodes(struct cnl_kube_sched *ks)
{
	json_t *nodes = NULL, *slices = NULL, *x;
	char err[512];
	size_t i;

	json_object_clear(ks->projects);
	json_object_clear(ks->run_ns);
	json_object_clear(ks->budgets);
	if (cnl_kube_call(ks->kc, "GET", "/api/v1/nodes", NULL, NULL, &nodes,
	                  err, sizeof(err)) != 200 ||
	    cnl_kube_call(ks->kc, "GET", SLICES, NULL, NULL, &slices, err,
	                  sizeof(err)) != 200) {
		cnl_log(CNL_LOG_WARN, "kube: cannot list nodes or slices",
		        "err=\"%s\"", err);
		goto out;
	}
	/* What a pod's selectors and tolerations read of our nodes: said
	 * when it changes (kubectl label, taint, cordon). */
	json_t *byname = json_object();
	json_array_foreach (json_object_get(nodes, "items"), i, x) {
		const char *name = S(json_object_get(x, "metadata"), "name");
		const json_t *y = name ? knode(ks, name) : NULL;

		if (!name)
			continue;
		json_object_set(byname, name, x);
		if (!y)
			continue;
		json_t *mx = node_marks(x), *my = node_marks(y);
		if (!json_equal(mx, my))
			cnl_log(CNL_LOG_INFO,
			        "kube: a node's labels, taints or cordon "
			        "changed",
			        "node=%s", name);
		json_decref(mx);
		json_decref(my);
	}
	json_decref(ks->knodes);
	ks->knodes = byname;
	/* A node of ours missing from the list, or whose slices went, is
	 * gone until it is there again. */
	for (size_t k = 0; k < ks->n_nodes; k++) {
		bool listed = false, sliced = false;
		json_array_foreach (json_object_get(nodes, "items"), i, x) {
			const char *n =
			    S(json_object_get(x, "metadata"), "name");
			listed |= n && strcmp(n, ks->nodes[k].name) == 0;
		}
		json_array_foreach (json_object_get(slices, "items"), i, x) {
			const char *n =
			    S(json_object_get(x, "spec"), "nodeName");
			sliced |= n && strcmp(n, ks->nodes[k].name) == 0;
		}
		if (ks->nodes[k].gone != !(listed && sliced))
			cnl_log(
			    CNL_LOG_INFO,
			    listed && sliced
			        ? "kube: a node is back"
			        : "kube: a node is gone from Kubernetes; its "
			          "heartbeats stop",
			    "node=%s", ks->nodes[k].name);
		ks->nodes[k].gone = !(listed && sliced);
	}
	json_array_foreach (json_object_get(nodes, "items"), i, x) {
		struct cnl_wire_register m;
		const char *name = S(json_object_get(x, "metadata"), "name");
		bool known = false;

		if (atomic_load(&ks->stop))
			break;
		for (size_t k = 0; name && k < ks->n_nodes; k++)
			known |= strcmp(ks->nodes[k].name, name) == 0;
		if (!name || known)
			continue;
		int r = cnl_kube_register_of(
		    x, json_object_get(slices, "items"), &m, err, sizeof(err));
		if (r == -ENOENT)
			continue;
		if (r < 0) {
			cnl_log(CNL_LOG_WARN, "kube: node not taken",
			        "err=\"%s\"", err);
			continue;
		}
		(void)node_add(ks, &m);
	}
	others(ks);
	workspaces(ks);
out:
	json_decref(nodes);
	json_decref(slices);
}

/* ---- the worker ---------------------------------------------------------- */

/* Pods that went and whose job ended are forgotten. */
static void compact(struct cnl_kube_sched *ks)
{
	size_t o = 0;
	bool moved = false;

	for (size_t i = 0; i < ks->n_pods; i++) {
		struct pod *p = &ks->pods[i];
		if (p->st == P_DONE && p->gone) {
			json_object_del(ks->by_uid, p->uid);
			json_decref(p->obj);
			json_decref(p->claim_obj);
			json_decref(p->where);
			moved = true;
			continue;
		}
		if (o != i)
			ks->pods[o] = *p;
		o++;
	}
	ks->n_pods = o;
	if (!moved)
		return;
	json_object_clear(ks->by_uid);
	json_object_clear(ks->by_job);
	for (size_t i = 0; i < ks->n_pods; i++) {
		json_object_set_new(ks->by_uid, ks->pods[i].uid,
		                    json_integer((json_int_t)i));
		if (ks->pods[i].job[0] && ks->pods[i].st != P_DONE)
			json_object_set_new(ks->by_job, ks->pods[i].job,
			                    json_integer((json_int_t)i));
	}
}

static void *worker(void *arg)
{
	struct cnl_kube_sched *ks = arg;
	long resync = ks->cfg.resync_ms > 0 ? ks->cfg.resync_ms : 10000;
	int64_t wait = 0;

	while (!atomic_load(&ks->stop)) {
		int64_t now;
		bool waiting = false, running = false;

		drain(ks, wait);
		now = cnl_time_now_ms();
		if (now >= ks->next_sync) {
			sync_nodes(ks);
			waiting_jobs(ks, now);
			ks->next_sync = now + resync;
		}
		tj_reconcile(ks);
		/* A stop is looked at between calls: with the API server
		 * gone each call may take its retries' time. */
		for (size_t i = 0; i < ks->n_pods && !atomic_load(&ks->stop);
		     i++) {
			step_pod(ks, &ks->pods[i], now);
			waiting |= ks->pods[i].st == P_SUBMITTED ||
			           ks->pods[i].st == P_NEW;
			running |= ks->pods[i].run && ks->pods[i].st == P_BOUND;
		}
		for (size_t i = 0; i < ks->n_nodes && !atomic_load(&ks->stop);
		     i++) {
			if (ks->nodes[i].gone)
				continue;
			assignments(ks, (int)i, now);
			if (now >= ks->nodes[i].next_hb)
				heartbeat(ks, (int)i, now);
		}
		compact(ks);
		/* Work waiting to be placed: look again soon. */
		wait = waiting ? 50 : running ? RUN_LOG_MS : 1000;
	}
	return NULL;
}

/* ---- start, stop --------------------------------------------------------- */

static void node_token(void *ud, char *buf, size_t len)
{
	const struct cnl_kube_sched *ks = ud;

	snprintf(buf, len, "%s", ks->as ? ks->as : "");
}

/* File @path's text (NUL-terminated, malloc'd), at most @max bytes;
 * NULL when it cannot be read or is longer. */
static char *read_text(const char *path, size_t max)
{
	FILE *f = fopen(path, "re");
	char *b;
	size_t n;

	if (!f)
		return NULL;
	b = cnl_xmalloc(max + 1);
	n = fread(b, 1, max + 1, f);
	if (ferror(f) || n > max) {
		fclose(f);
		free(b);
		return NULL;
	}
	fclose(f);
	b[n] = '\0';
	return b;
}

int cnl_kube_sched_start(const struct cnl_kube_sched_config *cfg,
                         struct cnl_kube_sched **ret, char *err, size_t errlen)
{
	struct cnl_kube_sched *ks = cnl_xcalloc(1, sizeof(*ks));
	struct cnl_kube_config kc = cfg->kube;
	int r;

	ks->cfg = *cfg;
	snprintf(ks->url, sizeof(ks->url), "%s", cfg->api_url);
	snprintf(ks->cafile, sizeof(ks->cafile), "%s",
	         cfg->api_cafile ? cfg->api_cafile : "");
	snprintf(ks->token, sizeof(ks->token), "%s", cfg->api_token);
	ks->cfg.api_token = NULL;
	snprintf(ks->image, sizeof(ks->image), "%s",
	         cfg->default_image && *cfg->default_image
	             ? cfg->default_image
	             : CNL_KUBE_DEFAULT_IMAGE);
	ks->cfg.default_image = NULL;
	snprintf(ks->registry, sizeof(ks->registry), "%s",
	         cfg->image_registry ? cfg->image_registry : "");
	ks->cfg.image_registry = NULL;
	if (cfg->secret && cfg->secret_len) {
		static const char what[] = "cnlab kube run pod proof";
		unsigned int n = 0;
		ks->has_proof_key =
		    HMAC(EVP_sha256(), cfg->secret, (int)cfg->secret_len,
		         (const unsigned char *)what, sizeof(what) - 1,
		         ks->proof_key, &n) != NULL &&
		    n == sizeof(ks->proof_key);
	}
	if (cfg->collect_image && cfg->collect_image[0] && cfg->collect_url &&
	    cfg->collect_url[0] && cfg->secret && cfg->secret_len) {
		if (strlen(cfg->collect_image) >= sizeof(ks->collect_image) ||
		    strlen(cfg->collect_url) >= sizeof(ks->collect_url)) {
			cnl_seterr(
			    err, errlen,
			    "kube: kube_collect_image or kube_collect_url "
			    "is too long");
			free(ks);
			return -EINVAL;
		}
		snprintf(ks->collect_image, sizeof(ks->collect_image), "%s",
		         cfg->collect_image);
		snprintf(ks->collect_url, sizeof(ks->collect_url), "%s",
		         cfg->collect_url);
		ks->secret = cnl_xmalloc(cfg->secret_len);
		memcpy(ks->secret, cfg->secret, cfg->secret_len);
		ks->secret_len = cfg->secret_len;
		char *pem = cfg->collect_cafile
		                ? read_text(cfg->collect_cafile, 65536)
		                : NULL;
		ks->collect_ca = pem ? cnl_kube_pem_certs(pem) : NULL;
		if (pem)
			explicit_bzero(pem, strlen(pem));
		free(pem);
		if (cfg->collect_cafile && !ks->collect_ca) {
			cnl_seterr(err, errlen,
			           "kube: cannot read a certificate from %s "
			           "(the collector's CA)",
			           cfg->collect_cafile);
			explicit_bzero(ks->secret, ks->secret_len);
			free(ks->secret);
			free(ks);
			return -EINVAL;
		}
	}
	ks->cfg.collect_image = ks->cfg.collect_url = NULL;
	ks->cfg.collect_cafile = NULL;
	ks->cfg.secret = NULL;
	ks->start_timeout =
	    cfg->start_timeout_ms > 0 ? cfg->start_timeout_ms : 300000;
	if (ks->cfg.watch_timeout_s <= 0)
		ks->cfg.watch_timeout_s = 60;
	/* Kept for the execs' clients, opened later. */
	snprintf(ks->kserver, sizeof(ks->kserver), "%s", kc.server ?: "");
	snprintf(ks->ktoken, sizeof(ks->ktoken), "%s", kc.token_file ?: "");
	snprintf(ks->kca, sizeof(ks->kca), "%s", kc.cafile ?: "");
	ks->cfg.kube = kc;
	ks->cfg.kube.server = kc.server ? ks->kserver : NULL;
	ks->cfg.kube.token_file = kc.token_file ? ks->ktoken : NULL;
	ks->cfg.kube.cafile = kc.cafile ? ks->kca : NULL;
	pthread_mutex_init(&ks->mu, NULL);
	pthread_cond_init(&ks->cv, NULL);
	pthread_mutex_init(&ks->review_mu, NULL);
	pthread_mutex_init(&ks->exec_mu, NULL);
	pthread_cond_init(&ks->exec_cv, NULL);
	ks->srv_pods = json_object();
	ks->queue = json_array();
	ks->by_uid = json_object();
	ks->by_job = json_object();
	ks->projects = json_object();
	ks->run_ns = json_object();
	ks->budgets = json_object();
	ks->knodes = json_object();
	ks->refused_nodes = json_object();
	ks->crs = json_object();
	ks->workspaces = json_object();
	if ((r = cnl_kube_open(&kc, &ks->kw, err, errlen)) < 0 ||
	    (r = cnl_kube_open(&kc, &ks->kt, err, errlen)) < 0 ||
	    (r = cnl_kube_open(&kc, &ks->kn, err, errlen)) < 0 ||
	    (r = cnl_kube_open(
	         &(struct cnl_kube_config){.server = kc.server,
	                                   .token_file = kc.token_file,
	                                   .cafile = kc.cafile,
	                                   .retries = 1},
	         &ks->kc, err, errlen)) < 0 ||
	    (r = cnl_kube_open(
	         &(struct cnl_kube_config){.server = kc.server,
	                                   .token_file = kc.token_file,
	                                   .cafile = kc.cafile,
	                                   .retries = -1},
	         &ks->ke, err, errlen)) < 0 ||
	    (r = cnl_kube_open(
	         &(struct cnl_kube_config){.server = kc.server,
	                                   .token_file = kc.token_file,
	                                   .cafile = kc.cafile,
	                                   .retries = 1,
	                                   .timeout_ms = 10000},
	         &ks->kr, err, errlen)) < 0) {
		cnl_kube_sched_stop(ks);
		return r;
	}
	/* cnlabd's own listener: as the user "kube", and as the nodes. */
	struct cnl_client_config cc = {
	    .base = ks->url,
	    .token = ks->token,
	    .cafile = ks->cafile[0] ? ks->cafile : NULL,
	    .user_agent = "cnlabd-kube",
	    .connect_timeout_ms = 5000,
	    .timeout_ms = 30000,
	};
	cnl_client_new(&cc, &ks->user);
	cc.token = NULL;
	cc.token_fn = node_token;
	cc.token_ud = ks;
	cnl_client_new(&cc, &ks->nodecl);
	ks->wpods = cnl_xcalloc(1, sizeof(*ks->wpods));
	*ks->wpods =
	    (struct watch){.ks = ks, .k = ks->kw, .path = PODS, .what = "pod"};
	ks->wtjs = cnl_xcalloc(1, sizeof(*ks->wtjs));
	*ks->wtjs = (struct watch){
	    .ks = ks, .k = ks->kt, .path = CNL_KUBE_TJ_PATH, .what = "tj"};
	ks->wnbs = cnl_xcalloc(1, sizeof(*ks->wnbs));
	*ks->wnbs = (struct watch){
	    .ks = ks, .k = ks->kn, .path = CNL_KUBE_NB_PATH, .what = "nb"};
	struct watch *ws[] = {ks->wpods, ks->wtjs, ks->wnbs};
	for (size_t i = 0; i < 3; i++) {
		if ((r = pthread_create(&ws[i]->thread, NULL, watcher,
		                        ws[i])) != 0) {
			cnl_seterr(err, errlen, "kube: cannot start a thread");
			cnl_kube_sched_stop(ks);
			return -r;
		}
		ws[i]->started = true;
	}
	if ((r = pthread_create(&ks->worker, NULL, worker, ks)) != 0) {
		cnl_seterr(err, errlen, "kube: cannot start a thread");
		cnl_kube_sched_stop(ks);
		return -r;
	}
	ks->started_k = true;
	if (ks->collect_image[0] && cfg->api) {
		cnl_api_set_collect_verify(cfg->api, collect_verify, ks);
		ks->verifying = true;
	}
	if (cfg->api) {
		cnl_api_set_kube_exec(cfg->api, server_exec, ks);
		cnl_api_set_kube_ssh(cfg->api, server_ssh, ks);
		ks->execing = true;
	}
	*ret = ks;
	return 0;
}

void cnl_kube_sched_stop(struct cnl_kube_sched *ks)
{
	if (!ks)
		return;
	if (ks->verifying) /* waits for a check under way */
		cnl_api_set_collect_verify(ks->cfg.api, NULL, NULL);
	if (ks->execing) { /* waits for an exec being opened */
		cnl_api_set_kube_exec(ks->cfg.api, NULL, NULL);
		cnl_api_set_kube_ssh(ks->cfg.api, NULL, NULL);
	}
	atomic_store(&ks->stop, true);
	/* The execs' threads see the stop within a second. */
	pthread_mutex_lock(&ks->exec_mu);
	while (ks->execs > 0)
		pthread_cond_wait(&ks->exec_cv, &ks->exec_mu);
	pthread_mutex_unlock(&ks->exec_mu);
	pthread_mutex_lock(&ks->mu);
	pthread_cond_broadcast(&ks->cv);
	pthread_mutex_unlock(&ks->mu);
	if (ks->started_k)
		pthread_join(ks->worker, NULL);
	struct watch *ws[] = {ks->wpods, ks->wtjs, ks->wnbs};
	for (size_t i = 0; i < 3; i++)
		if (ws[i] && ws[i]->started)
			pthread_join(ws[i]->thread, NULL);
	free(ks->wpods);
	free(ks->wtjs);
	free(ks->wnbs);
	for (size_t i = 0; i < ks->n_pods; i++) {
		json_decref(ks->pods[i].obj);
		json_decref(ks->pods[i].claim_obj);
		json_decref(ks->pods[i].where);
	}
	free(ks->pods);
	for (size_t i = 0; i < ks->n_nodes; i++)
		explicit_bzero(ks->nodes[i].cred, sizeof(ks->nodes[i].cred));
	free(ks->nodes);
	cnl_kube_close(ks->kw);
	cnl_kube_close(ks->kt);
	cnl_kube_close(ks->kn);
	cnl_kube_close(ks->ke);
	cnl_kube_close(ks->kc);
	cnl_kube_close(ks->kr);
	cnl_client_free(ks->user);
	cnl_client_free(ks->nodecl);
	json_decref(ks->queue);
	json_decref(ks->by_uid);
	json_decref(ks->by_job);
	json_decref(ks->projects);
	json_decref(ks->run_ns);
	json_decref(ks->budgets);
	json_decref(ks->knodes);
	json_decref(ks->assigned);
	json_decref(ks->placed);
	json_decref(ks->refused_nodes);
	json_decref(ks->crs);
	json_decref(ks->workspaces);
	explicit_bzero(ks->token, sizeof(ks->token));
	if (ks->secret)
		explicit_bzero(ks->secret, ks->secret_len);
	free(ks->secret);
	free(ks->collect_ca);
	pthread_mutex_destroy(&ks->mu);
	pthread_cond_destroy(&ks->cv);
	pthread_mutex_destroy(&ks->review_mu);
	pthread_mutex_destroy(&ks->exec_mu);
	pthread_cond_destroy(&ks->exec_cv);
	json_decref(ks->srv_pods);
	free(ks);
}
