/*
 * sched.c - the scheduler object: its configuration (defaults and
 * checks), creation and release, its fair-share account, and the reason
 * texts and decision lists of the public API (sched.h).
 *
 * One cycle (cnl_sched_cycle) and admission (cnl_sched_admit) are in
 * cycle.c and the files below it; see cycle-internal.h for the map.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/sched-internal.h"

static const char *const reason_text[] = {
#define CNL_REASON_TEXT(name, text) text,
    CNL_REASON_LIST(CNL_REASON_TEXT)
#undef CNL_REASON_TEXT
};

const char *cnl_reason_text(enum cnl_reason r)
{
	if ((unsigned)r >= CNL_WHY_COUNT_)
		return "unknown";
	return reason_text[r];
}

void cnl_sched_config_default(struct cnl_sched_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	memcpy(cfg->policy, "cnlab", 6);
	cfg->w_deadline = 4;
	cfg->w_fairshare = 2;
	cfg->w_age = 1;
	cfg->w_pack = 1;
	cfg->w_locality = 2.0 * CNL_SCORE_OPEN_NODE;
	cfg->w_network = 0.5 * CNL_SCORE_OPEN_NODE;
	cfg->w_frag = 10;
	cfg->w_prefer = 100.0 * CNL_SCORE_OPEN_NODE;
	cfg->order_multi = 0.3;
	cfg->age_max_ms = 7LL * 24 * 3600 * 1000;
	cfg->deadline_horizon_ms = 24LL * 3600 * 1000;
	cfg->min_run_ms = 10LL * 60 * 1000;
	cfg->grace_ms = 5LL * 60 * 1000;
	cfg->idle_power_down_ms = 30LL * 60 * 1000;
	cfg->default_runtime_ms = 4LL * 3600 * 1000;
	cfg->max_reservations = 8;
	cfg->preempt_class_gap = 1;
	cfg->frag_candidates = 4;
	cfg->fs_half_life_ms = CNL_FS_HALF_LIFE_DEFAULT_MS;
	cnl_task_mix_default(&cfg->mix);
}

static bool weight_ok(double w)
{
	return isfinite(w) && w >= 0;
}

/* The knobs an operator may set per cluster (cnl_sched_config_set). */
static const struct knob {
	const char *name;
	size_t off;
	char kind;  /* 'w': a weight (double >= 0), 'i': int, 's': ms as s */
	double max; /* largest value */
} knobs[] = {
#define W(f)                                                       \
	{                                                          \
#f, offsetof(struct cnl_sched_config, f), 'w', 1e9 \
	}
#define I(f, max)                                                  \
	{                                                          \
#f, offsetof(struct cnl_sched_config, f), 'i', max \
	}
    W(w_deadline),
    W(w_fairshare),
    W(w_age),
    W(w_pack),
    W(w_locality),
    W(w_network),
    W(w_frag),
    W(w_order),
    I(max_reservations, 1000),
    I(preempt_class_gap, 3),
    {"min_run_s", offsetof(struct cnl_sched_config, min_run_ms), 's',
     366.0 * 86400},
    {"grace_s", offsetof(struct cnl_sched_config, grace_ms), 's', 86400},
#undef W
#undef I
};

const char *cnl_sched_knob(size_t i)
{
	return i < sizeof(knobs) / sizeof(knobs[0]) ? knobs[i].name : NULL;
}

int cnl_sched_config_set(struct cnl_sched_config *cfg, const char *name,
                         double v)
{
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
		const struct knob *k = &knobs[i];
		char *at = (char *)cfg + k->off;

		if (strcmp(k->name, name) != 0)
			continue;
		if (!isfinite(v) || v < 0 || v > k->max ||
		    (k->kind != 'w' && v != floor(v)) ||
		    (strcmp(name, "preempt_class_gap") == 0 && v < 1))
			return -CNL_ECONFIG;
		if (k->kind == 'w')
			*(double *)(void *)at = v;
		else if (k->kind == 'i')
			*(int *)(void *)at = (int)v;
		else
			*(int64_t *)(void *)at = (int64_t)v * 1000;
		return 0;
	}
	return -CNL_ENOTFOUND;
}

int cnl_sched_new(const struct cnl_sched_config *cfg, struct cnl_sched **ret)
{
	const struct cnl_policy_ops *pol;
	struct cnl_sched *s;

	if (!memchr(cfg->policy, '\0', sizeof(cfg->policy)))
		return -CNL_ECONFIG;
	pol = cnl_policy_find(cfg->policy);
	if (!pol)
		return -CNL_ECONFIG;
	if (!weight_ok(cfg->w_deadline) || !weight_ok(cfg->w_fairshare) ||
	    !weight_ok(cfg->w_age) || !weight_ok(cfg->w_pack) ||
	    !weight_ok(cfg->w_locality) || !weight_ok(cfg->w_network) ||
	    !weight_ok(cfg->w_frag) || !weight_ok(cfg->w_order) ||
	    !weight_ok(cfg->w_prefer) || !weight_ok(cfg->order_multi))
		return -CNL_ECONFIG;
	if (cfg->age_max_ms <= 0 || cfg->deadline_horizon_ms <= 0 ||
	    cfg->min_run_ms < 0 || cfg->grace_ms < 0 ||
	    cfg->idle_power_down_ms < 0 || cfg->default_runtime_ms <= 0 ||
	    cfg->max_reservations < 0 || cfg->preempt_class_gap < 1 ||
	    cfg->preempt_class_gap > 3 || cfg->frag_candidates < 1 ||
	    cfg->frag_candidates > 32 || cfg->mix.n < 0 ||
	    cfg->mix.n > CNL_MIX_MAX)
		return -CNL_ECONFIG;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->pol = pol;
	cnl_fs_init(&s->fs, cfg->fs_half_life_ms);
	*ret = s;
	return 0;
}

void cnl_sched_free(struct cnl_sched *s)
{
	if (!s)
		return;
	cnl_fs_done(&s->fs);
	free(s->idle_since);
	free(s->teams);
	for (uint32_t i = 0; i < s->n_runs; i++)
		free(s->runs[i].v);
	free(s->runs);
	free(s->resv);
	free(s->resv_head);
	free(s->gang_nodes);
	for (size_t i = 0; i < sizeof(s->keep) / sizeof(s->keep[0]); i++)
		free(s->keep[i].p);
	cnl_sched_fit_free(s);
	free(s);
}

const struct cnl_sched_config *cnl_sched_config_of(const struct cnl_sched *s)
{
	return &s->cfg;
}

struct cnl_fairshare *cnl_sched_fairshare(struct cnl_sched *s)
{
	return &s->fs;
}

void cnl_decisions_done(struct cnl_decisions *d)
{
	free(d->d);
	d->d = NULL;
	d->n = d->cap = 0;
}

size_t cnl_sched_summary_hits(const struct cnl_sched *s)
{
	return s->sum_hits;
}
