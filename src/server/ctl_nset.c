/*
 * ctl_nset.c - the node sets that jobs are held to ("nodelist", "exclude"
 * of a submission; cnlabd's Kubernetes scheduler sends the nodes a pod's
 * selectors, affinity and tolerations allow) or placed on first
 * ("prefer", "avoid": a pod's preferences).
 *
 * A set is interned: every job with the same lists shares one, and the
 * scheduler's request points at it (struct cnl_alloc_req.nodes), so that
 * the cycle's caches tell sets apart by their address.  Its bits cover
 * every node of the cluster and are made again when a node joins
 * (ctl_nset_refresh()); a name that is no node's yet stands for nothing
 * until that node joins.  The lists are kept sorted and without repeats,
 * so that the same nodes make the same set.  Sets nothing points at (no
 * active workload, no copy in the undo journal) are freed once the table
 * has doubled since the last sweep: memory follows the sets in use, and
 * no tenant can use up a fixed number of them for the others.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "server/ctl-internal.h"

struct ctl_nset {
	struct cnl_node_set set; /* first: the request points here */
	json_t *in, *out;        /* names; NULL: every node, none */
	char *key;               /* the two lists as one text */
	bool mark;               /* in use, at a sweep */
};

/* Bits of @s for the cluster as it is now. */
static void nset_fill(const struct cnl_ctl *ctl, struct ctl_nset *s)
{
	const struct cnl_cluster *c = ctl->cluster;
	uint32_t n = c->n_nodes;
	size_t words = n / 64 + 1, i;
	json_t *v;
	int k;

	free(s->set.bits);
	s->set.bits = cnl_xcalloc(words, sizeof(uint64_t));
	if (!s->in) {
		for (size_t w = 0; w < words; w++)
			s->set.bits[w] = ~UINT64_C(0);
	} else {
		json_array_foreach (s->in, i, v)
			if ((k = cnl_cluster_find_node(
			         c, json_string_value(v))) >= 0)
				s->set.bits[k >> 6] |= UINT64_C(1) << (k & 63);
	}
	json_array_foreach (s->out, i, v)
		if ((k = cnl_cluster_find_node(c, json_string_value(v))) >= 0)
			s->set.bits[k >> 6] &= ~(UINT64_C(1) << (k & 63));
	s->set.len = n;
}

void ctl_nset_refresh(struct cnl_ctl *ctl)
{
	for (size_t i = 0; i < ctl->n_nsets; i++)
		if (ctl->nsets[i]->set.len != ctl->cluster->n_nodes)
			nset_fill(ctl, ctl->nsets[i]);
}

static void nset_free(struct ctl_nset *s)
{
	free(s->set.bits);
	json_decref(s->in);
	json_decref(s->out);
	free(s->key);
	free(s);
}

/* The set @s points at (its ctl_nset: the set is its first member). */
static struct ctl_nset *nset_of(const struct cnl_node_set *s)
{
	return (struct ctl_nset *)s;
}

/* Mark the sets job @j points at as in use. */
static void nset_keep(const struct cnl_job *j)
{
	if (j->req.nodes)
		nset_of(j->req.nodes)->mark = true;
	if (j->prefer)
		nset_of(j->prefer)->mark = true;
}

/* Free the sets nothing points at. */
static void nset_collect(struct cnl_ctl *ctl)
{
	size_t o = 0;

	for (size_t i = 0; i < ctl->n_nsets; i++)
		ctl->nsets[i]->mark = false;
	for (size_t k = 0; k < ctl->n_wl; k++)
		nset_keep(&ctl->wl[k].j);
	for (size_t k = 0; k < ctl->journal.n; k++)
		if (ctl->journal.rec[k].kind == CTL_UNDO_SAVED)
			nset_keep(&ctl->journal.rec[k].v.w.j);
	for (size_t i = 0; i < ctl->n_nsets; i++) {
		if (ctl->nsets[i]->mark)
			ctl->nsets[o++] = ctl->nsets[i];
		else
			nset_free(ctl->nsets[i]);
	}
	ctl->n_nsets = o;
	ctl->nsets_sweep = 2 * o > CTL_NSETS_SWEEP ? 2 * o : CTL_NSETS_SWEEP;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* @a's names sorted, each once (new); NULL for NULL. */
static json_t *names_sorted(const json_t *a)
{
	size_t n = json_array_size(a), k = 0;
	const char **v;
	json_t *out;

	if (!a)
		return NULL;
	v = cnl_xcalloc(n + 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		if (json_string_value(json_array_get(a, i)))
			v[k++] = json_string_value(json_array_get(a, i));
	qsort(v, k, sizeof(*v), cmp_name);
	out = json_array();
	for (size_t i = 0; i < k; i++)
		if (i == 0 || strcmp(v[i], v[i - 1]) != 0)
			json_array_append_new(out, json_string(v[i]));
	free(v);
	return out;
}

int ctl_nset_intern(struct cnl_ctl *ctl, const json_t *in_, const json_t *out_,
                    const struct cnl_node_set **ret)
{
	json_t *in = names_sorted(in_), *out = names_sorted(out_);
	json_t *k =
	    json_pack("[OO]", in ? in : json_null(), out ? out : json_null());
	char *key = json_dumps(k, JSON_COMPACT);
	struct ctl_nset *s;

	json_decref(k);
	*ret = NULL;
	if (!key) {
		json_decref(in);
		json_decref(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < ctl->n_nsets; i++)
		if (strcmp(ctl->nsets[i]->key, key) == 0) {
			free(key);
			json_decref(in);
			json_decref(out);
			*ret = &ctl->nsets[i]->set;
			return 0;
		}
	if (ctl->n_nsets >= ctl->nsets_sweep)
		nset_collect(ctl);
	if (ctl->n_nsets == ctl->cap_nsets) {
		ctl->cap_nsets = ctl->cap_nsets ? 2 * ctl->cap_nsets : 8;
		ctl->nsets = cnl_xrealloc(ctl->nsets,
		                          ctl->cap_nsets * sizeof(*ctl->nsets));
	}
	s = cnl_xcalloc(1, sizeof(*s));
	s->key = key;
	s->in = in;
	s->out = out;
	nset_fill(ctl, s);
	ctl->nsets[ctl->n_nsets++] = s;
	*ret = &s->set;
	return 0;
}

void ctl_nset_lists(const struct cnl_node_set *set, const json_t **in,
                    const json_t **out)
{
	const struct ctl_nset *s = nset_of(set);

	*in = s->in;
	*out = s->out;
}

void ctl_nset_free_all(struct cnl_ctl *ctl)
{
	for (size_t i = 0; i < ctl->n_nsets; i++)
		nset_free(ctl->nsets[i]);
	free(ctl->nsets);
	ctl->nsets = NULL;
	ctl->n_nsets = ctl->cap_nsets = 0;
}
