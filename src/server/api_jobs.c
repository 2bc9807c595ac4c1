/*
 * api_jobs.c - batch jobs: submit (shape or profile, priority, deadline
 * admission, run time, resources, GPU types, dataset, gangs of N, input
 * files (api_files.c), idempotency keys), list, show with the live status and
 * the placement's explanation, cancel (a gang together), logs and artifacts.
 *
 *   log      id = log_..., parent = job or server id
 *                                 {"stream", "data", "epoch"}
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/trace.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"
#include "wire/job.h"

static const char *const prio_names[] = {"low", "normal", "high", "critical"};

/* "priority": 0..3 or "low", "normal", "high", "critical". */
static int get_priority(json_t *body, int *ret, struct cnl_http_response *resp)
{
	json_t *v = json_object_get(body, "priority");

	if (!v) {
		*ret = CNL_PRIO_NORMAL;
		return 0;
	}
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) <= CNL_STORE_PRIO_MAX) {
		*ret = (int)json_integer_value(v);
		return 0;
	}
	for (int i = 0; json_is_string(v) && i < 4; i++)
		if (strcmp(json_string_value(v), prio_names[i]) == 0) {
			*ret = i;
			return 0;
		}
	cnl_api_bad(resp,
	            "field \"priority\": must be low, normal, high or critical "
	            "(or 0..3)");
	return -1;
}

/* The gang of job @j from its run record: the leader's id into @ret_id
 * (CNL_ID_MAX), rank and size.  0, or -1 for a job alone. */
int cnl_api_job_gang(const struct cnl_store_job *j, char *ret_id, int *ret_rank,
                     int *ret_size)
{
	json_t *run = json_loads(j->run, 0, NULL);
	json_t *g = json_object_get(run, "gang");
	const char *id = json_string_value(json_object_get(g, "id"));
	int r = -1;

	if (id && strlen(id) < CNL_ID_MAX) {
		snprintf(ret_id, CNL_ID_MAX, "%s", id);
		if (ret_rank)
			*ret_rank =
			    (int)json_integer_value(json_object_get(g, "rank"));
		if (ret_size)
			*ret_size =
			    (int)json_integer_value(json_object_get(g, "size"));
		r = 0;
	}
	json_decref(run);
	return r;
}

/* A copy of @src (a string or NULL) into @buf, "" when it does not fit. */
static void copy_str(char *buf, size_t size, const char *src)
{
	buf[0] = '\0';
	if (src && strlen(src) < size)
		memcpy(buf, src, strlen(src) + 1);
}

/* The names of list @key of run record @run into @out (up to 16). */
static void names_of(const json_t *run, const char *key,
                     char out[][CNL_WIRE_NAME_MAX], int *n)
{
	const json_t *v = json_object_get(run, key);

	for (size_t i = 0;
	     i < json_array_size(v) && *n < CNL_WIRE_NODE_LIST_MAX; i++)
		copy_str(out[(*n)++], CNL_WIRE_NAME_MAX,
		         json_string_value(json_array_get(v, i)));
}

/*
 * A run record's "placement" (written by the controller, ctl_run.c) as
 * the job document shows it: decided_ms becomes decided_at, and the rest
 * is the document's own.  False when the record holds none it can read.
 */
static bool run_placement(json_t *p, struct cnl_wire_placement *ret)
{
	json_t *o = json_deep_copy(p);
	json_int_t ms = json_integer_value(json_object_get(p, "decided_ms"));
	char err[256];
	int r;

	json_object_del(o, "decided_ms");
	json_object_set_new(o, "decided_at", cnl_api_time_json(ms));
	r = cnl_wire_placement_decode(o, ret, err, sizeof(err));
	json_decref(o);
	if (r < 0)
		cnl_log(CNL_LOG_DEBUG, "run record placement unreadable",
		        "err=\"%s\"", err);
	return r >= 0;
}

static bool ended(const char *state)
{
	return strcmp(state, "succeeded") == 0 ||
	       strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0;
}

/*
 * The job document of @j (wire/job.h) into *@m: the row, the live
 * status while it is active, and from its run record what it asked for
 * beyond its shape, how it ended, its gang (with the members from the
 * gang document) and where it ran.  Free with cnl_wire_job_done().
 */
static void job_doc(struct call *c, const struct cnl_store_job *j,
                    struct cnl_wire_job *m)
{
	json_t *run = json_loads(j->run, 0, NULL);
	json_t *g = json_object_get(run, "gang"), *v;

	memset(m, 0, sizeof(*m));
	copy_str(m->id, sizeof(m->id), j->id);
	copy_str(m->project_id, sizeof(m->project_id), j->project_id);
	copy_str(m->user_id, sizeof(m->user_id), j->user_id);
	copy_str(m->command, sizeof(m->command), j->command);
	copy_str(m->profile, sizeof(m->profile), j->profile);
	copy_str(m->gpu, sizeof(m->gpu), j->gpu_shape);
	m->priority = j->priority & 3;
	copy_str(m->state, sizeof(m->state), j->state);
	m->exit_code = j->exit_code;
	m->deadline_ms = j->deadline_ms;
	m->runtime_s = j->runtime_ms / 1000;
	m->created_ms = j->created_ms;
	m->updated_ms = j->updated_ms;
	/* An ended job has none (a follower's mirror may lag its end). */
	m->has_status =
	    !ended(j->state) && cnl_api_live_status(c, j->id, &m->status) == 0;
	/* Resources asked for, and how it ended, from the run record. */
	m->preemptible = !json_is_false(json_object_get(run, "preemptible"));
	copy_str(m->message, sizeof(m->message),
	         json_string_value(json_object_get(run, "message")));
	if (json_integer_value(json_object_get(run, "mem_mib")) > 0)
		m->mem_mib =
		    json_integer_value(json_object_get(run, "mem_mib"));
	if (json_integer_value(json_object_get(run, "cpu_milli")) > 0)
		m->cpu_milli =
		    json_integer_value(json_object_get(run, "cpu_milli"));
	if (json_is_array(v = json_object_get(run, "gpu_types"))) {
		m->has_gpu_types = true;
		for (size_t i = 0;
		     i < json_array_size(v) && i < CNL_WIRE_TYPES_MAX; i++)
			copy_str(m->gpu_types[m->n_gpu_types++],
			         sizeof(m->gpu_types[0]),
			         json_string_value(json_array_get(v, i)));
	}
	copy_str(m->dataset, sizeof(m->dataset),
	         json_string_value(json_object_get(run, "dataset")));
	copy_str(m->cluster, sizeof(m->cluster),
	         json_string_value(json_object_get(run, "cluster")));
	copy_str(m->image, sizeof(m->image),
	         json_string_value(json_object_get(run, "image")));
	names_of(run, "nodelist", m->nodelist, &m->n_nodelist);
	names_of(run, "exclude", m->exclude, &m->n_exclude);
	names_of(run, "prefer", m->prefer, &m->n_prefer);
	names_of(run, "avoid", m->avoid, &m->n_avoid);
	m->nodes = json_is_object(g)
	               ? (int)json_integer_value(json_object_get(g, "size"))
	               : 1;
	if (json_is_object(g)) {
		/* The gang, with its members from the gang document. */
		struct cnl_wire_job_gang *gg = cnl_xcalloc(1, sizeof(*gg));
		json_t *doc = NULL, *a;

		copy_str(gg->id, sizeof(gg->id),
		         json_string_value(json_object_get(g, "id")));
		gg->rank = (int)json_integer_value(json_object_get(g, "rank"));
		gg->size = m->nodes;
		if (gg->id[0] &&
		    cnl_api_doc_json(c->st, "gang", gg->id, &doc) == 0 &&
		    json_is_array(a = json_object_get(doc, "members"))) {
			gg->has_members = true;
			for (size_t i = 0;
			     i < json_array_size(a) && i < CNL_WIRE_GANG_MAX;
			     i++)
				copy_str(
				    gg->members[gg->n_members++],
				    sizeof(gg->members[0]),
				    json_string_value(json_array_get(a, i)));
		}
		json_decref(doc);
		m->gang = gg;
	}
	if (json_is_object(v = json_object_get(run, "placement")))
		m->has_placement = run_placement(v, &m->placement);
	if (json_is_object(v = json_object_get(run, "peer"))) {
		copy_str(m->peer, sizeof(m->peer),
		         json_string_value(json_object_get(v, "name")));
		copy_str(m->peer_job, sizeof(m->peer_job),
		         json_string_value(json_object_get(v, "job")));
	}
	json_decref(run);
}

json_t *cnl_api_job_json(struct call *c, const struct cnl_store_job *j)
{
	struct cnl_wire_job m;
	json_t *o;

	job_doc(c, j, &m);
	o = cnl_wire_job_encode(&m);
	cnl_wire_job_done(&m);
	return o;
}

/* The most members a gang may have (one node each). */
#define GANG_MAX 64

/* The most GPU types a job may list. */
#define GPU_TYPES_MAX 16

/*
 * "gpu_types": 1..16 type names or families of the catalog ("h100",
 * "A100-80GB"), which narrow the shape's own types: what is left must be
 * at least one type that can run the shape.  0 with the union of the
 * types in *@ret_mask (0 when absent), or -1 with a 400 naming the field.
 */
static int get_gpu_types(struct call *c, json_t *body, const char *shape,
                         uint64_t *ret_mask, struct cnl_http_response *resp)
{
	json_t *a = json_object_get(body, "gpu_types");
	const struct cnl_catalog *cat = &c->api->cat;
	struct cnl_alloc_req req;
	char buf[CNL_SHAPE_MAX], err[256];
	uint64_t m = 0, left;
	size_t i;

	*ret_mask = 0;
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) < 1 ||
	    json_array_size(a) > GPU_TYPES_MAX) {
		cnl_api_bad(
		    resp, "field \"gpu_types\": must be an array of 1..16 GPU "
		          "type names, e.g. [\"h100\", \"a100\"]");
		return -1;
	}
	for (i = 0; i < json_array_size(a); i++) {
		const char *t = json_string_value(json_array_get(a, i));
		uint64_t f = t && strlen(t) < CNL_NAME_MAX
		                 ? cnl_shape_family(cat, t)
		                 : 0;

		if (!f) {
			cnl_http_error(
			    resp, 400, "bad_request",
			    "field \"gpu_types\": %s%s%s is not a "
			    "GPU type or family of the catalog (e.g. "
			    "h100, a100-80gb, L40S)",
			    t ? "\"" : "", t ? t : "an entry", t ? "\"" : "");
			return -1;
		}
		m |= f;
	}
	if (cnl_shape_parse(cat, shape, &req, buf, err, sizeof(err)) < 0)
		return 0; /* the shape itself is refused by its own check */
	left = req.gpu_types & m;
	if (req.kind == CNL_REQ_MIG) {
		uint64_t mig = 0;

		for (int t = 0; t < cat->n; t++)
			if ((left >> t & 1) &&
			    cnl_mig_find(&cat->types[t], req.profile) >= 0)
				mig |= UINT64_C(1) << t;
		left = mig;
	}
	if (req.kind == CNL_REQ_CPU || !left) {
		cnl_http_error(
		    resp, 400, "bad_request",
		    "field \"gpu_types\": conflicts with the shape \"%s\" "
		    "(%s): no type is both; use a shape of any type, such as "
		    "any-25, or drop gpu_types",
		    shape,
		    req.kind == CNL_REQ_CPU ? "no GPU"
		                            : cnl_shape_type_name(cat, &req));
		return -1;
	}
	*ret_mask = m;
	return 0;
}

#define NODE_LIST_MAX 16 /* names in a nodelist or an exclude */

/*
 * Two lists of node names of a submission: @keys[0] and @keys[1], either
 * "nodelist" (the only nodes the job may run on) and "exclude" (nodes it
 * may not), or "prefer" (the nodes it is placed on first, where it fits)
 * and "avoid" (nodes it is placed on last).  Each an array of 1..16
 * names of registered nodes, 512 bytes of names at most in a pair (the
 * run record keeps them).  0 with the lists added to *@ret (an object,
 * made when NULL), or -1 with a 400 naming the field.
 */
static int get_node_lists(struct call *c, json_t *body,
                          const char *const keys[2], json_t **ret,
                          struct cnl_http_response *resp)
{
	size_t bytes = 0;

	for (int k = 0; k < 2; k++) {
		json_t *a = json_object_get(body, keys[k]), *v;
		size_t i;

		if (!a)
			continue;
		if (!json_is_array(a) || json_array_size(a) < 1 ||
		    json_array_size(a) > NODE_LIST_MAX) {
			cnl_http_error(
			    resp, 400, "bad_request",
			    "field \"%s\": must be an array of 1..%d "
			    "node names (cnlab node list)",
			    keys[k], NODE_LIST_MAX);
			return -1;
		}
		json_array_foreach (a, i, v) {
			const char *n = json_string_value(v);
			if (!n || !n[0] || strlen(n) >= CNL_STORE_NAME_MAX ||
			    !cnl_ctl_node_named(c->api->ctl, n)) {
				cnl_http_error(
				    resp, 400, "bad_request",
				    "field \"%s[%zu]\": %s%.63s%s is not a "
				    "registered node (cnlab node list)",
				    keys[k], i, n ? "\"" : "",
				    n ? n : "an entry", n ? "\"" : "");
				return -1;
			}
			bytes += strlen(n);
		}
		if (!*ret)
			*ret = json_object();
		json_object_set(*ret, keys[k], a);
	}
	if (bytes > 512) {
		cnl_http_error(resp, 400, "bad_request",
		               "fields \"%s\" and \"%s\": more than 512 "
		               "bytes of node names together",
		               keys[0], keys[1]);
		return -1;
	}
	return 0;
}

/*
 * A submission's "cluster": the cluster it must run in (its nodes
 * labelled so, or "default" for unlabelled ones), one that has a node or
 * a policy of its own.  Added to *@ret (made when NULL).  0, or -1 with a
 * 400 naming the field.
 */
static int get_cluster(struct call *c, json_t *body, json_t **ret,
                       struct cnl_http_response *resp)
{
	json_t *v = json_object_get(body, "cluster");
	const char *name = json_string_value(v);

	if (!v)
		return 0;
	if (cnl_api_cluster_name(c, name, resp) < 0)
		return -1;
	if (!cnl_ctl_project_pinned(c->api->ctl, c->project.id, name)) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"cluster\": project %s is pinned to "
		               "other clusters (cnlab project show)",
		               c->project.name);
		return -1;
	}
	if (cnl_ctl_cluster_quota_spent(c->api->ctl, c->project.id, name)) {
		cnl_http_error(resp, 403, "quota_exceeded",
		               "project \"%s\" has used its GPU-hours quota in "
		               "cluster %s; ask an administrator to raise it, "
		               "or submit without --cluster",
		               c->project.name, name);
		c->note = "GPU-hours";
		return -1;
	}
	if (!*ret)
		*ret = json_object();
	json_object_set(*ret, "cluster", v);
	return 0;
}

/* The run record a job starts with: what it asks for beyond its shape
 * (see ctl.h, "Run records"), and the submission's trace context (the
 * request's span), so that a job still pending when cnlabd restarts keeps
 * its trace (ctl_trace.c). */
static int initial_run(char *buf, size_t len, bool preemptible, int64_t cpu,
                       int64_t mem, json_t *types, const char *dataset,
                       const char *image, const char *gang, int rank, int size,
                       int secrets, const json_t *where)
{
	json_t *o =
	    json_pack("{s:b,s:I,s:I}", "preemptible", preemptible, "cpu_milli",
	              (json_int_t)cpu, "mem_mib", (json_int_t)mem);
	char *t;
	int r = 0;

	if (types)
		json_object_set(o, "gpu_types", types);
	if (dataset)
		json_object_set_new(o, "dataset", json_string(dataset));
	if (where)
		json_object_update(o, (json_t *)where);
	if (image && image[0] && strcmp(image, "host") != 0)
		json_object_set_new(o, "image", json_string(image));
	if (secrets > 0)
		json_object_set_new(o, "secrets", json_integer(secrets));
	if (size > 1)
		json_object_set_new(o, "gang",
		                    json_pack("{s:s,s:i,s:i}", "id", gang,
		                              "rank", rank, "size", size));
	if (cnl_trace_current()) {
		char tp[CNL_TRACE_HEADER_MAX];

		cnl_trace_format(cnl_trace_current(), tp);
		json_object_set_new(o, "traceparent", json_string(tp));
	}
	t = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!t || strlen(t) >= len)
		r = -CNL_ESIZE;
	else
		memcpy(buf, t, strlen(t) + 1);
	free(t);
	return r;
}

/* In words: what a deadline check rested on. */
static void admission_text(const struct cnl_ctl_admission *a, char *buf,
                           size_t len)
{
	char rt[32], as[32];

	cnl_duration_format(a->runtime_ms, rt, sizeof(rt));
	cnl_duration_format(a->assumed_runtime_ms, as, sizeof(as));
	snprintf(buf, len,
	         "%s%s; %d running workload%s without a run time "
	         "assumed to run %s",
	         a->finish ? "checked that it finishes by then with its run "
	                     "time of "
	                   : "checked only that it starts by then: no "
	                     "run time given",
	         a->finish ? rt : "", a->unestimated,
	         a->unestimated == 1 ? "" : "s", as);
}

/* The document's "deadline_check" from what the check rested on. */
static void admission_check(const struct cnl_ctl_admission *a,
                            struct cnl_wire_deadline_check *ret)
{
	memset(ret, 0, sizeof(*ret));
	admission_text(a, ret->text, sizeof(ret->text));
	ret->finish = a->finish;
	ret->runtime_s = a->finish ? a->runtime_ms / 1000 : 0;
	ret->earliest_start_ms = a->start > 0 ? a->start : 0;
	ret->unestimated_running = a->unestimated;
	ret->assumed_runtime_s = a->assumed_runtime_ms / 1000;
}

void cnl_api_h_jobs_create(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {
	    "command",   "gpu",         "profile",   "priority", "deadline",
	    "runtime_s", "preemptible", "cpu_milli", "mem_mib",  "inputs",
	    "gpu_types", "dataset",     "nodes",     "image",    "secrets",
	    "nodelist",  "exclude",     "prefer",    "avoid",    "cluster",
	    NULL};
	static const char *const held[2] = {"nodelist", "exclude"};
	static const char *const preferred[2] = {"prefer", "avoid"};
	struct call *c = call;
	struct cnl_store_job j = {0}, got;
	const char *command, *gpu = NULL, *profile = NULL, *key, *dl = NULL;
	const char *dataset = NULL, *image = NULL;
	char img[CNL_STORE_IMAGE_MAX] = "";
	int64_t runtime = 0, cpu = 0, mem = 0, nodes = 1;
	struct cnl_ctl_admission adm = {0};
	bool preemptible = true, fresh = true, attached = false;
	json_t *inputs = NULL, *members = NULL, *srefs = NULL, *where = NULL;
	uint64_t types = 0;
	int prio, r;
	char err[256];
	json_t *body;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(command = cnl_api_get_string(body, "command",
	                                   CNL_STORE_COMMAND_MAX, resp)))
		goto out;
	if (cnl_json_get_string(body, "gpu", false, &gpu, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_string(body, "profile", false, &profile, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "deadline", false, &dl, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "runtime_s", false, 0, 366LL * 86400,
	                     &runtime, err, sizeof(err)) < 0 ||
	    cnl_json_get_bool(body, "preemptible", false, &preemptible, err,
	                      sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "cpu_milli", false, 1, 1024 * 1000, &cpu,
	                     err, sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "mem_mib", false, 1, 16LL << 20, &mem, err,
	                     sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "dataset", false, &dataset, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "image", false, &image, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "nodes", false, 1, GANG_MAX, &nodes, err,
	                     sizeof(err)) < 0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if (dataset && !cnl_label_valid(dataset)) {
		cnl_api_bad(
		    resp,
		    "field \"dataset\": must be a name of 1..63 "
		    "characters of A-Z a-z 0-9 . _ -, not starting with . "
		    "or -");
		goto out;
	}
	if (image && cnl_api_image_check(c, image, img, sizeof(img), resp) < 0)
		goto out;
	if (!gpu == !profile) {
		cnl_api_bad(resp,
		            "give exactly one of \"gpu\" (a shape such as "
		            "h100-25) and \"profile\"");
		goto out;
	}
	if (get_priority(body, &prio, resp) < 0 ||
	    cnl_api_idem_key(c, req, resp, "job", &key) < 0)
		goto out;
	/* "inputs": uploads (PUT /v1/projects/{project}/uploads) written
	 * into the job's working directory before it starts (nodes share
	 * no file system with the user's machine).  A retry of a
	 * submission that was made answers that job: its uploads are its
	 * inputs now, not uploads any more. */
	if (!c->idem.replay &&
	    cnl_api_job_inputs_check(c, body, resp, &inputs) < 0)
		goto out;
	/* "secrets": its node fetches them at the start (api_secrets.c). */
	if (cnl_api_secrets_take(c, body, &srefs, resp) < 0)
		goto out;
	if (profile) {
		if (cnl_api_profile_shape(c, profile, j.gpu_shape,
		                          sizeof(j.gpu_shape), NULL) < 0) {
			cnl_api_bad(
			    resp, "field \"profile\": no such profile (see GET "
			          "/v1/profiles)");
			goto out;
		}
		snprintf(j.profile, sizeof(j.profile), "%s", profile);
	} else {
		if (strlen(gpu) >= sizeof(j.gpu_shape) ||
		    cnl_ctl_shape_check(c->api->ctl, gpu, err, sizeof(err)) <
		        0) {
			char msg[320];

			snprintf(msg, sizeof(msg), "field \"gpu\": %s",
			         strlen(gpu) >= sizeof(j.gpu_shape) ? "too long"
			                                            : err);
			cnl_api_bad(resp, msg);
			goto out;
		}
		snprintf(j.gpu_shape, sizeof(j.gpu_shape), "%s", gpu);
	}
	if (get_gpu_types(c, body, j.gpu_shape, &types, resp) < 0 ||
	    get_node_lists(c, body, held, &where, resp) < 0 ||
	    get_node_lists(c, body, preferred, &where, resp) < 0)
		goto out;
	if (get_cluster(c, body, &where, resp) < 0)
		goto out;
	if (dl && cnl_time_parse_rfc3339(dl, &j.deadline_ms) < 0) {
		cnl_api_bad(
		    resp,
		    "field \"deadline\": must be an RFC 3339 time such as "
		    "2026-04-30T17:00:00Z");
		goto out;
	}
	if (j.deadline_ms && j.deadline_ms <= c->now_ms) {
		cnl_api_bad(resp, "field \"deadline\": is in the past");
		goto out;
	}
	if (cnl_api_new_id(c, "job", j.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	memcpy(j.project_id, c->project.id, sizeof(j.project_id));
	memcpy(j.user_id, c->user.id, sizeof(j.user_id));
	snprintf(j.command, sizeof(j.command), "%s", command);
	j.priority = prio;
	j.runtime_ms = runtime * 1000;
	snprintf(j.state, sizeof(j.state), "pending");
	if (initial_run(j.run, sizeof(j.run), preemptible, cpu, mem,
	                types ? json_object_get(body, "gpu_types") : NULL,
	                dataset, img, j.id, 0, (int)nodes,
	                (int)json_array_size(srefs), where) < 0) {
		cnl_api_bad(resp, "the job's fields are too long together");
		goto out;
	}
	j.created_ms = j.updated_ms = c->now_ms;
	/* Quota and the deadline apply to new jobs: a retried request
	 * (same Idempotency-Key) gets its original job back regardless. */
	if (key) {
		if (cnl_store_tx_begin(c->api->store) < 0) {
			cnl_http_error(resp, 500, "internal", "store");
			goto out;
		}
		r = cnl_store_job_create(c->api->store, &j, key, &got);
		cnl_store_tx_rollback(c->api->store); /* only a lookup */
		fresh = r == CNL_STORE_CREATED;
	}
	if (fresh && cnl_api_quota_admit(c, false, resp) < 0)
		goto out;
	if (fresh && cnl_api_feasible(c, j.gpu_shape, j.run, false, resp) < 0)
		goto out;
	if (fresh && j.deadline_ms &&
	    cnl_ctl_admit(c->api->ctl, &j, c->now_ms, &adm) == -CNL_EDEADLINE) {
		char when[CNL_TIME_RFC3339_MAX] = "never", how[256];

		if (adm.start > 0)
			cnl_time_format_rfc3339(adm.start, when, sizeof(when));
		admission_text(&adm, how, sizeof(how));
		cnl_http_error(resp, 422, "deadline_infeasible",
		               "the deadline cannot be met: the earliest "
		               "possible start is %s (%s)",
		               when, how);
		goto out;
	}
	/* The job, the rest of its gang and its files are stored in one
	 * transaction.  The job made here is the gang's leader (rank 0),
	 * the one returned; a retry (Idempotency-Key) replays only it. */
	if ((r = cnl_store_tx_begin(c->api->store)) < 0) {
		cnl_api_store_error(c, resp, r, "job");
		goto out;
	}
	r = cnl_store_job_create(c->api->store, &j, key, &got);
	if (r == CNL_STORE_CREATED && nodes > 1) {
		members = json_array();
		json_array_append_new(members, json_string(got.id));
		for (int k = 1; r >= 0 && k < nodes; k++) {
			struct cnl_store_job m = j, mgot;

			if (cnl_api_new_id(c, "job", m.id) < 0 ||
			    initial_run(
			        m.run, sizeof(m.run), preemptible, cpu, mem,
			        types ? json_object_get(body, "gpu_types")
			              : NULL,
			        dataset, img, j.id, k, (int)nodes,
			        (int)json_array_size(srefs), where) < 0) {
				r = -ENOMEM;
				break;
			}
			r = cnl_store_job_create(c->api->store, &m, NULL,
			                         &mgot);
			if (r >= 0)
				json_array_append_new(members,
				                      json_string(mgot.id));
		}
		if (r >= 0) {
			json_t *g = json_pack("{s:O,s:I}", "members", members,
			                      "size", (json_int_t)nodes);

			r = cnl_api_doc_save(c, "gang", j.id, j.id, "", g,
			                     true);
			json_decref(g);
			if (r >= 0)
				r = CNL_STORE_CREATED;
		}
	}
	if (r == CNL_STORE_CREATED && inputs) {
		int ar = cnl_api_job_inputs_attach(c, got.id, inputs);

		attached = true;
		if (ar < 0)
			r = ar; /* else r stays CNL_STORE_CREATED */
	}
	if (r == CNL_STORE_CREATED && srefs) {
		int sr = cnl_api_secrets_attach(c, got.id, srefs);

		if (sr < 0)
			r = sr;
	}
	/* The key's request hash, with the job (a retry with another body
	 * is then 422). */
	if (r == CNL_STORE_CREATED && key) {
		int ir = cnl_api_idem_record(c, got.id);

		if (ir < 0)
			r = ir;
	}
	if (r >= 0) {
		int cr = cnl_store_tx_commit(c->api->store);

		if (cr < 0)
			r = cr; /* -ENOSPC: a full disk is 507 */
	}
	if (attached)
		cnl_api_job_inputs_done(c, inputs, r >= 0);
	if (r < 0) {
		cnl_store_tx_rollback(c->api->store);
		if (r == -CNL_EDUP && key) {
			cnl_http_error(
			    resp, 409, "conflict",
			    "Idempotency-Key already used for another "
			    "request");
			goto out;
		}
		cnl_api_store_error(c, resp, r, "job");
		goto out;
	}
	if (cnl_api_created_here(c, resp, r, got.id, got.project_id) < 0)
		goto out;
	if (r == CNL_STORE_CREATED) {
		cnl_ctl_job_added(c->api->ctl, &got);
		cnl_api_decisions_submit(c, got.id, got.gpu_shape, got.run,
		                         got.priority, false);
		for (size_t k = 1; k < json_array_size(members); k++) {
			struct cnl_store_job m;

			if (cnl_store_job_get(
			        c->api->store,
			        json_string_value(json_array_get(members, k)),
			        &m) == 0) {
				cnl_ctl_job_added(c->api->ctl, &m);
				cnl_api_decisions_submit(c, m.id, m.gpu_shape,
				                         m.run, m.priority,
				                         false);
			}
		}
		cnl_ctl_kick_submitted(c->api->ctl);
	}
	{
		struct cnl_wire_job doc;

		job_doc(c, &got, &doc);
		/* Which estimate the deadline was checked with. */
		if (fresh && j.deadline_ms) {
			doc.has_deadline_check = true;
			admission_check(&adm, &doc.deadline_check);
		}
		cnl_http_reply(resp, r == CNL_STORE_REPLAYED ? 200 : 201,
		               cnl_wire_job_encode(&doc));
		cnl_wire_job_done(&doc);
	}
out:
	json_decref(inputs);
	json_decref(members);
	json_decref(srefs);
	json_decref(where);
	json_decref(body);
}

void cnl_api_h_jobs_list(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_job *jobs;
	struct cnl_wire_jobs page = {0};
	const char *after;
	int limit, n = 0, r;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	jobs = cnl_xcalloc((size_t)limit, sizeof(*jobs));
	r = cnl_store_job_list(c->st, c->project.id, after, limit, jobs, &n);
	if (r < 0) {
		free(jobs);
		cnl_api_store_error(c, resp, r, "job");
		return;
	}
	page.items = cnl_xcalloc((size_t)n + 1, sizeof(*page.items));
	for (int i = 0; i < n; i++)
		job_doc(c, &jobs[i], &page.items[page.n++]);
	if (n == limit && n)
		copy_str(page.next, sizeof(page.next), jobs[n - 1].id);
	cnl_http_reply(resp, 200, cnl_wire_jobs_encode(&page));
	cnl_wire_jobs_done(&page);
	free(jobs);
}

void cnl_api_h_job_get(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_wire_job doc;
	struct cnl_wire_job_gang *g;

	job_doc(c, &c->job, &doc);
	/* One job shows where its whole gang runs: each member's state and
	 * node, zone and rack, by rank (the listings leave this out: it
	 * costs a read per member). */
	if ((g = doc.gang)) {
		g->has_placements = true;
		for (int i = 0; i < g->n_members; i++) {
			struct cnl_wire_gang_place *it =
			    &g->placements[g->n_placements];
			struct cnl_wire_placement p;
			struct cnl_store_job m;
			json_t *run, *pj;

			if (!g->members[i][0] ||
			    cnl_store_job_get(c->st, g->members[i], &m) < 0)
				continue;
			memset(it, 0, sizeof(*it));
			copy_str(it->id, sizeof(it->id), m.id);
			it->rank = i;
			copy_str(it->state, sizeof(it->state), m.state);
			run = json_loads(m.run, 0, NULL);
			pj = json_object_get(run, "placement");
			if (json_is_object(pj) && run_placement(pj, &p)) {
				copy_str(it->node, sizeof(it->node), p.node);
				copy_str(it->zone, sizeof(it->zone), p.zone);
				copy_str(it->rack, sizeof(it->rack), p.rack);
			}
			json_decref(run);
			g->n_placements++;
		}
	}
	cnl_http_reply(resp, 200, cnl_wire_job_encode(&doc));
	cnl_wire_job_done(&doc);
}

void cnl_api_h_job_cancel(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	int r;

	char gang[CNL_ID_MAX];

	snprintf(c->target, sizeof(c->target), "%s", c->job.id);
	/* Forwarded to a peer site: cancelled there, then here once it
	 * ended there (federate.h). */
	if (cnl_federate_cancel(c->api->federate, c->job.id)) {
		cnl_http_reply(resp, 202, cnl_api_job_json(c, &c->job));
		return;
	}
	/* Cancelling any member of a gang cancels the gang. */
	if (cnl_api_job_gang(&c->job, gang, NULL, NULL) == 0)
		r = cnl_ctl_stop_gang(c->api->ctl, gang, c->now_ms);
	else
		r = cnl_ctl_stop_workload(c->api->ctl, c->job.id, c->now_ms);
	if (r == -CNL_ENOTFOUND) {
		cnl_http_error(resp, 409, "conflict", "job already %s",
		               c->job.state);
		return;
	}
	if (r < 0 ||
	    (r = cnl_store_job_get(c->api->store, c->job.id, &c->job)) < 0) {
		cnl_api_store_error(c, resp, r, "job");
		return;
	}
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200, cnl_api_job_json(c, &c->job));
}

/* Log chunks of a job, oldest first, paged by chunk id. */
static json_t *log_item(struct call *c, const struct cnl_store_doc *d,
                        json_t *body)
{
	json_object_set_new(body, "id", json_string(d->id));
	json_object_set_new(body, "at", cnl_api_time_json(d->updated_ms));
	return json_incref(body);
}

void cnl_api_h_job_logs(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_api_doc_page(c, req, resp, "log", c->job.id, "log", log_item);
}
