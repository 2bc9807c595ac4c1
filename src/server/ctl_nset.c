/*
 * ctl_nset.c - the node sets that jobs are held to ("nodelist", "exclude"
 * of a submission; cnlabd's Kubernetes scheduler sends the nodes a pod's
 * selectors, affinity and tolerations allow).
 *
 * A set is interned: every job with the same lists shares one, and the
 * scheduler's request points at it (struct cnl_alloc_req.nodes), so that
 * the cycle's caches tell sets apart by their address.  Its bits cover
 * every node of the cluster and are made again when a node joins
 * (ctl_nset_refresh()); a name that is no node's yet stands for nothing
 * until that node joins.  A set is freed only when the table is full and
 * no active workload, nor the undo journal, points at it.
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

/* Free the sets nothing points at; true when one was. */
static bool nset_collect(struct cnl_ctl *ctl)
{
	bool *used = cnl_xcalloc(ctl->n_nsets + 1, sizeof(bool)), any = false;
	size_t o = 0;

	for (size_t i = 0; i < ctl->n_nsets; i++) {
		const struct cnl_node_set *s = &ctl->nsets[i]->set;
		for (size_t k = 0; k < ctl->n_wl && !used[i]; k++)
			used[i] = ctl->wl[k].j.req.nodes == s;
		for (size_t k = 0; k < ctl->journal.n && !used[i]; k++)
			used[i] = ctl->journal.rec[k].kind == CTL_UNDO_SAVED &&
			          ctl->journal.rec[k].v.w.j.req.nodes == s;
	}
	for (size_t i = 0; i < ctl->n_nsets; i++) {
		if (used[i]) {
			ctl->nsets[o++] = ctl->nsets[i];
			continue;
		}
		nset_free(ctl->nsets[i]);
		any = true;
	}
	ctl->n_nsets = o;
	free(used);
	return any;
}

int ctl_nset_intern(struct cnl_ctl *ctl, const json_t *in, const json_t *out,
                    const struct cnl_node_set **ret)
{
	json_t *k = json_pack("[OO]", in ? (json_t *)in : json_null(),
	                      out ? (json_t *)out : json_null());
	char *key = json_dumps(k, JSON_COMPACT);
	struct ctl_nset *s;

	json_decref(k);
	*ret = NULL;
	if (!key)
		return -ENOMEM;
	for (size_t i = 0; i < ctl->n_nsets; i++)
		if (strcmp(ctl->nsets[i]->key, key) == 0) {
			free(key);
			*ret = &ctl->nsets[i]->set;
			return 0;
		}
	if (ctl->n_nsets >= CTL_NSETS_MAX && !nset_collect(ctl)) {
		free(key);
		return -CNL_ELIMIT;
	}
	if (ctl->n_nsets == ctl->cap_nsets) {
		ctl->cap_nsets = ctl->cap_nsets ? 2 * ctl->cap_nsets : 8;
		ctl->nsets = cnl_xrealloc(ctl->nsets,
		                          ctl->cap_nsets * sizeof(*ctl->nsets));
	}
	s = cnl_xcalloc(1, sizeof(*s));
	s->key = key;
	s->in = in ? json_deep_copy(in) : NULL;
	s->out = out ? json_deep_copy(out) : NULL;
	nset_fill(ctl, s);
	ctl->nsets[ctl->n_nsets++] = s;
	*ret = &s->set;
	return 0;
}

void ctl_nset_lists(const struct cnl_node_set *set, const json_t **in,
                    const json_t **out)
{
	/* The set is the first member of its ctl_nset. */
	const struct ctl_nset *s = (const struct ctl_nset *)set;

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
