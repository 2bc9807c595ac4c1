/*
 * ctl_admit.c - admission: could a request ever run on the nodes that are
 * registered?  A job or server that no node could ever take (a GPU type
 * no node has, more whole GPUs than the largest node holds, a MIG profile
 * no GPU offers, a gang wider than the nodes of its kind, CPU or memory
 * beyond any node) is refused at submission instead of pending forever.
 *
 * Every registered node counts as a shape that exists, whatever its state:
 * a cordoned, drained or lost node may come back, and work waiting for it
 * is not hopeless.  Only its size matters here (the node as if empty),
 * never what runs on it now: "not now" is the scheduler's business, "never"
 * is admission's.  With no node registered at all nothing is refused: a
 * fresh platform takes work before its first node joins, and the job waits
 * with the reason "no nodes registered".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/ctl-internal.h"
#include "server/shape.h"

/* In words, why no node of the cluster @c could take @p (of @gang nodes). */
static void why_not(const struct cnl_cluster *c, const struct cnl_req_prep *p,
                    const char *shape, int gang, int hosts, char *why,
                    size_t len)
{
	const struct cnl_alloc_req *r = &p->req;
	const struct cnl_catalog *cat = c->cat;
	int64_t cpu = 0, mem = 0;
	int typed = 0, mig = 0, gpus = 0;

	/* Narrow step by step as the request does: type, profile, count,
	 * CPU and memory; the first step that leaves nothing is the reason. */
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];

		if (r->kind != CNL_REQ_CPU) {
			if (!n->n_gpus || n->gpu_type < 0 ||
			    !(p->type_ok >> n->gpu_type & 1))
				continue;
			typed++;
			if (r->kind == CNL_REQ_MIG && p->prof[n->gpu_type] < 0)
				continue;
			mig++;
			if (n->n_gpus > gpus)
				gpus = n->n_gpus;
			if (r->kind == CNL_REQ_WHOLE && n->n_gpus < r->gpus)
				continue;
		}
		if (n->cpu_total > cpu)
			cpu = n->cpu_total;
		if (n->mem_total > mem)
			mem = n->mem_total;
	}
	if (r->kind == CNL_REQ_MIG && !mig) {
		/* The profile is the shape's last part ("any-1g.5gb"). */
		const char *prof =
		    strrchr(shape, '-') ? strrchr(shape, '-') + 1 : shape;
		const char *owner = "no GPU type";

		for (int t = cat->n - 1; t >= 0; t--)
			if (cnl_mig_find(&cat->types[t], prof) >= 0)
				owner = cat->types[t].name;
		snprintf(why, len,
		         "MIG profile %s is not offered by the GPU of any node "
		         "(it is one of %s's)",
		         prof, owner);
	} else if (r->kind != CNL_REQ_CPU && !typed)
		snprintf(why, len, "no node has GPU type %s",
		         cnl_shape_type_name(cat, r));
	else if (r->kind == CNL_REQ_WHOLE && r->gpus > gpus)
		snprintf(why, len,
		         "%d whole GPUs asked, the largest node has %d",
		         r->gpus, gpus);
	else if (r->cpu_milli > cpu)
		snprintf(why, len,
		         "cpu_milli %" PRId64 " asked, the largest node "
		         "of that kind has %" PRId64,
		         r->cpu_milli, cpu);
	else if (r->mem_mib > mem)
		snprintf(why, len,
		         "mem_mib %" PRId64 " asked, the largest node of "
		         "that kind has %" PRId64,
		         r->mem_mib, mem);
	else
		snprintf(why, len,
		         "a gang of %d nodes asked, only %d node%s of that "
		         "kind %s registered",
		         gang, hosts, hosts == 1 ? "" : "s",
		         hosts == 1 ? "is" : "are");
}

int cnl_ctl_feasible(struct cnl_ctl *ctl, const char *project_id,
                     const char *shape, const char *run, bool server, char *why,
                     size_t whylen)
{
	const struct cnl_cluster *c = ctl->cluster;
	struct wl *tmp;
	struct cnl_req_prep p;
	json_t *rj = NULL;
	int gang = 1, hosts = 0, r;

	snprintf(why, whylen, "no nodes registered: it waits for the first");
	if (c->n_nodes == 0)
		return 0; /* a fresh platform: wait for the first node */
	tmp = cnl_xcalloc(1, sizeof(*tmp));
	tmp->node = -1;
	tmp->server = server;
	/* Its own team, as it will be scheduled (no team made up here). */
	snprintf(tmp->project_id, sizeof(tmp->project_id), "%s", project_id);
	if ((r = ctl_wl_job(ctl, tmp, shape, 1, 0, 0, 0, true)) < 0)
		goto out;
	if (run && (rj = json_loads(run, 0, NULL)) &&
	    (r = ctl_wl_job_fields(ctl, tmp, rj, false)) < 0)
		goto out;
	gang = (int)json_integer_value(
	    json_object_get(json_object_get(rj, "gang"), "size"));
	if (gang < 1)
		gang = 1;
	tmp->j.req.project = 0;
	if ((r = cnl_alloc_prepare(ctl->cluster, &tmp->j.req, &p)) < 0)
		goto out;
	int anywhere = 0;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		bool could = cnl_node_could_host(&c->nodes[i], &p);
		anywhere += could;
		hosts += could && cnl_req_node_ok(&p.req, i);
	}
	if (hosts >= gang) {
		snprintf(why, whylen, "%d of %u registered nodes could run it",
		         hosts, c->n_nodes);
		goto out;
	}
	if (anywhere == 0 && ctl_cloud_could_run(ctl, project_id, &p)) {
		snprintf(why, whylen,
		         "no node registered could run it, but the burst "
		         "policy's cloud instances could: it bursts");
		r = 0;
		goto out;
	}
	if (anywhere >= gang)
		snprintf(why, whylen,
		         "%d of the nodes it may use (its nodelist, less its "
		         "exclude) could run it; it needs %d",
		         hosts, gang);
	else
		why_not(c, &p, shape, gang, hosts, why, whylen);
	r = -CNL_ENOSPACE;
out:
	json_decref(rj);
	free(tmp);
	return r;
}

json_t *cnl_ctl_shapes_json(struct cnl_ctl *ctl)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_catalog *cat = c->cat;
	json_t *a = json_array();

	/* One entry per kind of node: GPU type and count, CPU, memory. */
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		bool seen = false;
		size_t k;
		json_t *o;

		for (uint32_t j = 0; j < i && !seen; j++) {
			const struct cnl_node *m = &c->nodes[j];

			seen = m->n_gpus == n->n_gpus &&
			       (!n->n_gpus || m->gpu_type == n->gpu_type) &&
			       m->cpu_total == n->cpu_total &&
			       m->mem_total == n->mem_total;
		}
		if (seen)
			continue;
		k = 0;
		for (uint32_t j = i; j < c->n_nodes; j++) {
			const struct cnl_node *m = &c->nodes[j];

			k += m->n_gpus == n->n_gpus &&
			     (!n->n_gpus || m->gpu_type == n->gpu_type) &&
			     m->cpu_total == n->cpu_total &&
			     m->mem_total == n->mem_total;
		}
		o = json_pack("{s:I,s:i,s:I,s:I}", "nodes", (json_int_t)k,
		              "gpus", n->n_gpus, "cpu_milli",
		              (json_int_t)n->cpu_total, "mem_mib",
		              (json_int_t)n->mem_total);
		if (n->n_gpus && n->gpu_type >= 0 && n->gpu_type < cat->n) {
			const struct cnl_gpu_type *t = &cat->types[n->gpu_type];
			json_t *mig = json_array();

			json_object_set_new(o, "gpu_type",
			                    json_string(t->name));
			for (int m = 0; m < t->n_mig; m++)
				json_array_append_new(
				    mig, json_string(t->mig[m].name));
			json_object_set_new(o, "mig_profiles", mig);
		} else {
			json_object_set_new(o, "gpu_type", json_null());
		}
		json_array_append_new(a, o);
	}
	return a;
}

int cnl_ctl_queue_position(struct cnl_ctl *ctl, const char *id, int *ret_pos,
                           int *ret_n)
{
	const struct wl *me = ctl_wl_find(ctl, id);
	int cnt[4], pos = 1, n = 0;

	if (!me)
		return -CNL_ENOTFOUND;
	/* Ahead: pending work of a higher class, or of the same class
	 * submitted earlier, which is all of its class but itself (the
	 * order's first keys; fair share and deadlines may still move it).
	 * Counts from the census, without a scan per submission. */
	ctl_pending_census(ctl, cnt);
	for (int p = 0; p < 4; p++) {
		if (cnt[p] < 0)
			cnt[p] = 0; /* a census gone stale */
		n += cnt[p];
		if (p > (me->j.prio & 3))
			pos += cnt[p];
		else if (p == (me->j.prio & 3) && cnt[p] > 0)
			pos += cnt[p] - 1;
	}
	if (pos > n)
		n = pos;
	*ret_pos = pos;
	*ret_n = n;
	return 0;
}
