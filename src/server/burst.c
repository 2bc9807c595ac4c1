/*
 * burst.c - the burst policy acting (see burst.h).
 *
 * Memory holds the instances not yet ended; each change of one is
 * written to its document first (kind "cloud_instance", id its record's)
 * so that a restarted cnlabd knows what it pays for.  The provider is
 * called without the API's lock: a launch records its instance (state
 * "launching", a client token derived from the record) before the call,
 * so an answer lost on the way launches nothing twice when retried.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/api-internal.h"
#include "server/burst.h"
#include "server/cloud.h"

#define KIND              "cloud_instance"
#define DESCRIBE_EVERY_MS 5000
#define NO_CAPACITY_MS    (5 * 60 * 1000) /* a type a market lacks */
#define BACKOFF_MIN_MS    5000
#define BACKOFF_MAX_MS    (5 * 60 * 1000)
#define BUDGET_AHEAD_S    60.0  /* the spend is stopped this far ahead */
#define LAUNCH_WORTH_S    600.0 /* a launch must afford this long */
#define LAUNCH_PER_TICK   4
#define RETURN_MARGIN     0.2   /* owned clusters this far under: return */
#define ACT_MAX_MS        30000 /* calls started per tick, at most this long */
#define RECOVER_WAIT_MS   (2 * 60 * 1000) /* EC2 lists a launch by then */
#define MAX_LIVE          64
#define JOB_TRIES         3 /* launches for one waiting job, at most */

enum ist {
	I_LAUNCHING, /* recorded; the provider's answer not yet */
	I_BOOTING,   /* launched; its agent has not joined */
	I_RUNNING,
	I_DRAINING, /* cordoned: its work finishes, no new work */
	I_ENDING,   /* fenced; to terminate */
	I_ENDED,
	I_FAILED, /* never launched */
};
static const char *const ist_names[] = {
    "launching", "booting", "running", "draining", "ending", "ended", "failed"};

struct inst {
	char id[CNL_ID_MAX];
	char account[CNL_ID_MAX];
	char node[CNL_STORE_NAME_MAX];
	char cluster[CNL_NAME_MAX];
	char type[64];
	char model[CNL_NAME_MAX];
	char instance[CNL_CLOUD_ID_MAX];
	char token[96]; /* the launch's client token */
	char reason[200];
	int gpus;
	bool spot;
	double price_h;
	enum ist st;
	int64_t launched_ms, joined_ms, ended_ms, idle_ms;
	json_t *jobs; /* the jobs it was launched for */
	/* This tick, off the lock: what to ask, and what came back (read
	 * by settle() only, so that metrics never see half an answer). */
	bool do_launch;
	/* Being terminated by the reaper (its call off the lock). */
	bool reaping;
	/* Recorded as launching when cnlabd stopped: whether EC2 launched
	 * it is found by its tag (act()); since when it was recorded. */
	bool recover, recovered;
	int64_t recorded_ms;
	char got_instance[CNL_CLOUD_ID_MAX], got_type[64], got_token[96];
	bool got_spot;
	double got_price;
	int tried;            /* the plan entry last asked for, -1: none */
	char plan[8][2][64];  /* (type, market) to try, in order */
	double plan_price[8]; /* each one's on-demand price */
	double max_price;     /* the dearest the budget affords */
	int nplan;
	struct cnl_cloud *cl; /* its account's provider, this tick */
	char user_data[2048];
	struct cnl_cloud_error err;
	int rc;
};

struct cnl_burst {
	struct cnl_api *api;
	struct cnl_burst_config cfg;
	char cfg_image[256], cfg_agent[256], cfg_url[256];
	pthread_t th;
	bool started;
	atomic_bool stop;
	struct inst *in;
	size_t n, cap;
	double closed; /* spent by instances ended */
	/* A provider per account in use (records keep theirs while they
	 * live, whatever account the policy uses now). */
	struct {
		char account[CNL_ID_MAX];
		struct cnl_cloud *c;
	} prov[8];
	size_t nprov;
	/* Launches per job waiting: a job that an instance did not serve
	 * gets no fourth one. */
	json_t *tries;
	int64_t backoff_until, backoff_ms, describe_ms;
	bool exhausted, auth_failed, budget_noted;
	char auth_account[CNL_ID_MAX];
	char open_noted[CNL_ID_MAX]; /* an account that would not open */
	struct {
		char type[64];
		bool spot;
		int64_t until;
	} nocap[32];
	uint64_t launches, launch_fails, interruptions;
	/* The reaper: a thread of its own terminates what is given back
	 * (its own providers, per account), so that a slow return or an
	 * outage's retries hold no launch back.  (Fencing stays the tick's:
	 * a slow launch still delays it.) */
	pthread_t reaper;
	bool reaper_started;
	struct {
		char account[CNL_ID_MAX];
		struct cnl_cloud *c;
	} rprov[8];
	size_t nrprov;
};

/* ---- records ------------------------------------------------------------ */

static double cost_of(const struct inst *i, int64_t now)
{
	int64_t end;

	if (i->launched_ms <= 0)
		return 0;
	end = i->ended_ms > 0 ? i->ended_ms : now;
	return end > i->launched_ms
	           ? (double)(end - i->launched_ms) / 3600000.0 * i->price_h
	           : 0;
}

static json_t *inst_json(const struct inst *i, int64_t now)
{
	return json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:f,s:s,s:I,s:I,s:I,s:s,s:O,"
	    "s:f,s:s}",
	    "account", i->account, "node", i->node, "cluster", i->cluster,
	    "type", i->type, "model", i->model, "instance", i->instance, "gpus",
	    i->gpus, "market", i->spot ? "spot" : "on-demand", "price_h",
	    i->price_h, "state", ist_names[i->st], "launched_ms",
	    (json_int_t)i->launched_ms, "joined_ms", (json_int_t)i->joined_ms,
	    "ended_ms", (json_int_t)i->ended_ms, "reason", i->reason, "jobs",
	    i->jobs ? i->jobs : json_null(), "cost", cost_of(i, now), "token",
	    i->token);
}

static int save(struct cnl_burst *b, const struct inst *i, int64_t now,
                bool create)
{
	struct cnl_store_doc d = {0};
	json_t *o = inst_json(i, now);
	int r;

	snprintf(d.kind, sizeof(d.kind), KIND);
	snprintf(d.id, sizeof(d.id), "%s", i->id);
	snprintf(d.name, sizeof(d.name), "%s", i->node);
	d.body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	d.updated_ms = now;
	r = cnl_store_doc_put(b->api->store, &d, create);
	free(d.body);
	if (r < 0)
		cnl_log(CNL_LOG_ERROR, "cannot record a cloud instance",
		        "id=%s err=%s", i->id, cnl_errname(r));
	return r;
}

static void inst_free(struct inst *i)
{
	json_decref(i->jobs);
	i->jobs = NULL;
}

/* Drop ended and failed instances from memory. */
static void compact(struct cnl_burst *b)
{
	size_t k = 0;

	for (size_t i = 0; i < b->n; i++) {
		if (b->in[i].st == I_ENDED || b->in[i].st == I_FAILED) {
			inst_free(&b->in[i]);
			continue;
		}
		b->in[k++] = b->in[i];
	}
	b->n = k;
}

static struct inst *inst_add(struct cnl_burst *b)
{
	if (b->n == b->cap) {
		b->cap = 2 * b->cap + 8;
		b->in = cnl_xrealloc(b->in, b->cap * sizeof(*b->in));
	}
	memset(&b->in[b->n], 0, sizeof(b->in[0]));
	return &b->in[b->n++];
}

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

int cnl_burst_new(struct cnl_api *api, const struct cnl_burst_config *cfg,
                  struct cnl_burst **ret)
{
	struct cnl_burst *b = cnl_xcalloc(1, sizeof(*b));
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char after[CNL_STORE_DOC_ID_MAX] = "";
	int n, r;

	b->api = api;
	b->cfg = *cfg;
	b->tries = json_object();
	copy(b->cfg_image, sizeof(b->cfg_image), cfg->image);
	copy(b->cfg_agent, sizeof(b->cfg_agent),
	     cfg->agent ? cfg->agent : "/usr/local/bin/cnlab-agent");
	copy(b->cfg_url, sizeof(b->cfg_url), cfg->url);
	if (b->cfg.interval_ms <= 0)
		b->cfg.interval_ms = 1000;
	if (b->cfg.idle_ms <= 0)
		b->cfg.idle_ms = 10000;
	if (b->cfg.boot_ms <= 0)
		b->cfg.boot_ms = 10 * 60 * 1000;
	if (b->cfg.max_instances <= 0)
		b->cfg.max_instances = 16;
	if (b->cfg.max_instances > MAX_LIVE)
		b->cfg.max_instances = MAX_LIVE;
	do {
		n = 0;
		if ((r = cnl_store_doc_list(api->store, KIND, NULL,
		                            after[0] ? after : NULL,
		                            CNL_STORE_LIST_MAX, d, &n)) < 0)
			break;
		for (int k = 0; k < n; k++) {
			json_t *o = json_loads(d[k].body, 0, NULL);
			struct inst *i;
			const char *st =
			    json_string_value(json_object_get(o, "state"));
			int s = -1;

			for (int q = 0; st && q <= I_FAILED; q++)
				if (strcmp(st, ist_names[q]) == 0)
					s = q;
			if (!o || s < 0) {
				json_decref(o);
				continue;
			}
			i = inst_add(b);
			copy(i->id, sizeof(i->id), d[k].id);
#define S_(f, key) \
	copy(i->f, sizeof(i->f), json_string_value(json_object_get(o, key)))
			S_(account, "account");
			S_(node, "node");
			S_(cluster, "cluster");
			S_(type, "type");
			S_(model, "model");
			S_(instance, "instance");
			S_(token, "token");
			S_(reason, "reason");
#undef S_
			i->gpus =
			    (int)json_integer_value(json_object_get(o, "gpus"));
			i->spot =
			    json_string_value(json_object_get(o, "market")) &&
			    strcmp(
			        json_string_value(json_object_get(o, "market")),
			        "spot") == 0;
			i->price_h =
			    json_number_value(json_object_get(o, "price_h"));
			i->st = (enum ist)s;
			i->launched_ms = json_integer_value(
			    json_object_get(o, "launched_ms"));
			i->joined_ms =
			    json_integer_value(json_object_get(o, "joined_ms"));
			i->ended_ms =
			    json_integer_value(json_object_get(o, "ended_ms"));
			i->jobs = json_incref(json_object_get(o, "jobs"));
			json_decref(o);
			if (i->st == I_LAUNCHING) {
				i->recover = true;
				i->recorded_ms = d[k].updated_ms;
			}
			if (i->st == I_ENDED || i->st == I_FAILED)
				b->closed += cost_of(i, 0);
			else
				cnl_ctl_cloud_node(api->ctl, i->node,
				                   i->cluster, i->price_h);
		}
		if (n > 0)
			copy(after, sizeof(after), d[n - 1].id);
		cnl_store_docs_done(d, n);
	} while (n == CNL_STORE_LIST_MAX);
	free(d);
	if (r < 0) {
		cnl_burst_free(b);
		return r;
	}
	compact(b);
	*ret = b;
	return 0;
}

/* ---- the policy and the account ---------------------------------------- */

struct policy {
	bool enabled;
	double threshold, budget;
	char provider[16];
	bool spot, on_demand, spot_first;
};

static bool read_policy(struct cnl_burst *b, struct policy *p)
{
	json_t *o = NULL;
	const char *prov, *strat;

	memset(p, 0, sizeof(*p));
	if (cnl_api_doc_json(b->api->store, "policy", "burst", &o) < 0)
		return false;
	prov = json_string_value(json_object_get(o, "provider"));
	strat = json_string_value(json_object_get(o, "strategy"));
	p->enabled = json_is_true(json_object_get(o, "enabled"));
	p->threshold = json_number_value(json_object_get(o, "threshold"));
	p->budget = json_number_value(json_object_get(o, "max_cloud_budget"));
	copy(p->provider, sizeof(p->provider), prov);
	strat = strat ? strat : "spot-then-on-demand";
	p->spot = strcmp(strat, "on-demand") != 0;
	p->on_demand = strcmp(strat, "spot") != 0;
	p->spot_first = p->spot;
	json_decref(o);
	return prov != NULL;
}

/* A type the account offers, known (GPUs) and priced: its on-demand
 * price, or -1. */
static double od_price(const json_t *acct, const char *provider,
                       const char *type, const struct cnl_cloud_type **t)
{
	const json_t *pr =
	    json_object_get(json_object_get(acct, "prices"), type);

	*t = cnl_api_cloud_type(acct, provider, type);
	if (!*t)
		return -1;
	return json_is_number(pr) ? json_number_value(pr) : (*t)->on_demand_h;
}

/* The provider of account @id, opened once (under the lock); NULL when it
 * cannot be opened (audited once per account). */
static struct cnl_cloud *provider_of(struct cnl_burst *b, const char *id,
                                     int64_t now)
{
	char err[256];
	struct cnl_cloud *c = NULL;

	for (size_t k = 0; k < b->nprov; k++)
		if (strcmp(b->prov[k].account, id) == 0)
			return b->prov[k].c;
	if (b->nprov == CNL_ARRAY_SIZE(b->prov))
		return NULL;
	if (cnl_api_cloud_open(b->api, id, &c, err, sizeof(err)) < 0) {
		if (strcmp(b->open_noted, id) != 0) {
			copy(b->open_noted, sizeof(b->open_noted), id);
			cnl_api_audit_as(b->api, "burst", "cloud.launch", id,
			                 now, "cannot use the account: %.90s",
			                 err);
		}
		return NULL;
	}
	copy(b->prov[b->nprov].account, CNL_ID_MAX, id);
	b->prov[b->nprov++].c = c;
	return c;
}

/* ---- ending ------------------------------------------------------------- */

/* Fence @i's node (its credentials and join token die, the node is lost,
 * its work requeued) and mark it to terminate; audited. */
static void fence(struct cnl_burst *b, struct inst *i, int64_t now,
                  const char *why)
{
	struct cnl_store *s = b->api->store;

	if (i->st == I_ENDING || i->st == I_ENDED || i->st == I_FAILED ||
	    i->recover)
		return;
	if (cnl_store_tx_begin(s) < 0 || cnl_api_node_forget(s, i->node) < 0 ||
	    cnl_store_tx_commit(s) < 0) {
		/* Its credentials still open: not fenced; tried again. */
		cnl_store_tx_rollback(s);
		return;
	}
	cnl_ctl_node_revoke(b->api->ctl, i->node, now);
	copy(i->reason, sizeof(i->reason), why);
	i->st = i->instance[0] ? I_ENDING : I_FAILED;
	if (i->st == I_FAILED)
		i->ended_ms = now;
	save(b, i, now, false);
	cnl_api_audit_as(b->api, "burst", "cloud.return", i->node, now,
	                 "fenced, given back: %s", why);
}

static void ended(struct cnl_burst *b, struct inst *i, int64_t now,
                  const char *how)
{
	i->st = I_ENDED;
	i->ended_ms = now;
	b->closed += cost_of(i, now);
	save(b, i, now, false);
	cnl_api_audit_as(b->api, "burst", "cloud.terminated", i->node, now,
	                 "%s %s after %.0f s; cost %.4f", i->instance, how,
	                 (double)(now - i->launched_ms) / 1000.0,
	                 cost_of(i, now));
}

/* ---- one tick ------------------------------------------------------------ */

static const json_t *view_node(const json_t *view, const char *name)
{
	size_t k;
	json_t *n;

	json_array_foreach (json_object_get(view, "nodes"), k, n)
		if (strcmp(json_string_value(json_object_get(n, "name")),
		           name) == 0)
			return n;
	return NULL;
}

static bool model_ok(const json_t *job, const char *model)
{
	const json_t *m = json_object_get(job, "models");
	size_t k;
	json_t *v;

	if (json_array_size(m) == 0)
		return true;
	json_array_foreach (m, k, v)
		if (strcmp(json_string_value(v), model) == 0)
			return true;
	return false;
}

/* Whether instance type @t could run pending @job (GPUs, model, CPU and
 * memory). */
static bool type_fits(const json_t *job, const struct cnl_cloud_type *t)
{
	return t->gpus >= json_integer_value(json_object_get(job, "gpus")) &&
	       model_ok(job, t->model) &&
	       (int64_t)t->vcpus * 1000 >=
	           json_integer_value(json_object_get(job, "cpu_milli")) &&
	       (int64_t)t->mem_gib * 1024 >=
	           json_integer_value(json_object_get(job, "mem_mib"));
}

/* Whether instance @i's GPUs could run pending @job. */
static bool serves(const struct inst *i, const json_t *job)
{
	const struct cnl_cloud_type *t =
	    strncmp(i->cluster, "cloud-", 6) == 0
	        ? cnl_cloud_type_find(i->cluster + 6, i->type)
	        : NULL;

	if (t)
		return type_fits(job, t);
	return i->gpus >= json_integer_value(json_object_get(job, "gpus")) &&
	       model_ok(job, i->model);
}

/* Whether pending @job may be served by a cloud cluster @cluster. */
static bool may_leave(const json_t *job, const char *cluster)
{
	const char *asked = json_string_value(json_object_get(job, "asked"));

	const json_t *pins = json_object_get(job, "pins");
	bool pinned_out = json_is_array(pins);
	size_t k;
	json_t *v;

	json_array_foreach (pins, k, v)
		if (strcmp(json_string_value(v), cluster) == 0)
			pinned_out = false;
	return !json_is_true(json_object_get(job, "on_prem_only")) &&
	       !pinned_out &&
	       (!asked || !*asked || strcmp(asked, cluster) == 0);
}

static bool nocap(struct cnl_burst *b, const char *type, bool spot, int64_t now)
{
	for (size_t k = 0; k < CNL_ARRAY_SIZE(b->nocap); k++)
		if (b->nocap[k].until > now && b->nocap[k].spot == spot &&
		    strcmp(b->nocap[k].type, type) == 0)
			return true;
	return false;
}

static void set_nocap(struct cnl_burst *b, const char *type, bool spot,
                      int64_t now)
{
	size_t best = 0;

	for (size_t k = 0; k < CNL_ARRAY_SIZE(b->nocap); k++)
		if (b->nocap[k].until < b->nocap[best].until)
			best = k;
	copy(b->nocap[best].type, sizeof(b->nocap[best].type), type);
	b->nocap[best].spot = spot;
	b->nocap[best].until = now + NO_CAPACITY_MS;
}

/* The markets to try for a launch of @best's GPUs: each type that fits
 * @job, cheapest first, in the strategy's order of markets. */
static void markets(struct cnl_burst *b, const struct policy *pol,
                    const json_t *acct, const json_t *job,
                    const struct cnl_cloud_type *best, struct inst *i,
                    int64_t now)
{
	const bool order[2] = {pol->spot_first, !pol->spot_first};
	const struct cnl_cloud_type *c[16];
	double price[16];
	size_t n = 0, q;
	json_t *tv;

	json_array_foreach (json_object_get(acct, "instance_types"), q, tv) {
		const struct cnl_cloud_type *t;
		double pr =
		    od_price(acct, pol->provider, json_string_value(tv), &t);
		size_t x;

		if (pr < 0 || n == 16 || !type_fits(job, t) ||
		    strcmp(t->model, best->model) != 0)
			continue;
		/* insertion: cheapest first */
		for (x = n; x > 0 && price[x - 1] > pr; x--) {
			c[x] = c[x - 1];
			price[x] = price[x - 1];
		}
		c[x] = t;
		price[x] = pr;
		n++;
	}
	for (size_t x = 0; x < n; x++)
		for (int m = 0; m < 2 && i->nplan < 8; m++) {
			bool spot = order[m];

			if ((spot && !pol->spot) ||
			    (!spot && !pol->on_demand) ||
			    nocap(b, c[x]->name, spot, now))
				continue;
			copy(i->plan[i->nplan][0], 64, c[x]->name);
			copy(i->plan[i->nplan][1], 64,
			     spot ? "spot" : "on-demand");
			i->plan_price[i->nplan] = price[x];
			i->nplan++;
		}
}

/*
 * The launches this tick: per job waiting that may leave, oldest first,
 * room on an instance planned this tick, else a new one of the cheapest
 * type that fits it, while the forecast's excess is not yet covered.
 */
static void plan(struct cnl_burst *b, const struct policy *pol,
                 const json_t *view, const json_t *acct, const char *acct_id,
                 int64_t now)
{
	char cluster[CNL_NAME_MAX];
	double excess = 0, coming = 0, spent = b->closed, rate = 0;
	const json_t *types = json_object_get(acct, "instance_types");
	json_t *c, *j;
	size_t k, live = 0;
	struct {
		size_t ix; /* in b->in, which may move as it grows */
		double room;
	} planned[LAUNCH_PER_TICK];
	int np = 0;
	bool owned_hot = false;
	char why[200] = "";

	snprintf(cluster, sizeof(cluster), "cloud-%s", pol->provider);
	for (size_t q = 0; q < b->n; q++) {
		const struct inst *i = &b->in[q];
		const json_t *vn = view_node(view, i->node);

		spent += cost_of(i, now);
		if (i->st <= I_ENDING) {
			live++;
			rate += i->price_h;
		}
		if ((i->st == I_LAUNCHING && !i->recover) ||
		    i->st == I_BOOTING ||
		    (i->st == I_RUNNING && vn &&
		     !json_is_true(json_object_get(vn, "busy"))))
			coming += 100.0 * i->gpus;
	}
	/* Owned clusters past the threshold; then cloud clusters (work
	 * moved there) wherever their demand passes what joined, but only
	 * while owned GPUs are past it too: asking for the cloud cluster
	 * does not skip the threshold. */
	json_array_foreach (json_object_get(view, "clusters"), k, c) {
		double cap = json_number_value(json_object_get(c, "capacity")),
		       dem = json_number_value(json_object_get(c, "demand"));

		if (json_is_true(json_object_get(c, "cloud")) || cap <= 0 ||
		    dem <= cap || dem / cap < pol->threshold)
			continue;
		owned_hot = true;
		excess += dem - cap;
		if (!why[0])
			snprintf(why, sizeof(why), "%s forecast %.2f >= %.2f",
			         json_string_value(json_object_get(c, "name")),
			         dem / cap, pol->threshold);
	}
	json_array_foreach (json_object_get(view, "clusters"), k, c) {
		double cap = json_number_value(json_object_get(c, "capacity")),
		       dem = json_number_value(json_object_get(c, "demand"));

		if (!owned_hot || !json_is_true(json_object_get(c, "cloud")) ||
		    dem <= cap)
			continue;
		excess += dem - cap;
	}
	/* Work no node of ours could ever run (a GPU type not owned): the
	 * cloud is the only place it can go, whatever the forecast. */
	json_array_foreach (json_object_get(view, "pending"), k, j)
		if (json_is_true(json_object_get(j, "nowhere")) &&
		    may_leave(j, cluster)) {
			excess +=
			    json_number_value(json_object_get(j, "blocks")) *
			    (double)json_integer_value(
			        json_object_get(j, "gpus"));
			if (!why[0])
				snprintf(why, sizeof(why),
				         "no GPU owned could run it");
		}
	excess -= coming;
	json_array_foreach (json_object_get(view, "pending"), k, j) {
		const char *id = json_string_value(json_object_get(j, "id"));
		double need =
		    json_number_value(json_object_get(j, "blocks")) *
		    (double)json_integer_value(json_object_get(j, "gpus"));
		const struct cnl_cloud_type *best = NULL, *t;
		double best_price = 0, price;
		struct inst *i;
		size_t q;
		json_t *tv;

		if (excess <= 0)
			break;
		if (!may_leave(j, cluster) ||
		    json_integer_value(json_object_get(b->tries, id)) >=
		        JOB_TRIES)
			continue;
		/* Room on an instance planned this tick. */
		for (int p = 0; p < np; p++) {
			struct inst *pi = &b->in[planned[p].ix];

			if (planned[p].room >= need && model_ok(j, pi->model) &&
			    pi->gpus >= json_integer_value(
			                    json_object_get(j, "gpus"))) {
				planned[p].room -= need;
				json_array_append(pi->jobs,
				                  json_object_get(j, "id"));
				excess -= need;
				need = -1;
				break;
			}
		}
		if (need < 0)
			continue;
		if (np == LAUNCH_PER_TICK ||
		    live + (size_t)np >= (size_t)b->cfg.max_instances)
			break;
		json_array_foreach (types, q, tv) {
			price = od_price(acct, pol->provider,
			                 json_string_value(tv), &t);
			if (price < 0 || !type_fits(j, t))
				continue;
			if (!best || price < best_price) {
				best = t;
				best_price = price;
			}
		}
		if (!best)
			continue;
		/* The budget: what is spent, and the first ten minutes of
		 * all that would run, this tick's launches included. */
		if (spent + (rate + best_price) * LAUNCH_WORTH_S / 3600.0 >
		    pol->budget) {
			if (b->budget_noted)
				break;
			b->budget_noted = true;
			cnl_api_audit_as(
			    b->api, "burst", "cloud.budget", id, now,
			    "no launch: %.4f of %.4f spent; 10 min of %s at "
			    "%.4f/h would pass the budget",
			    spent, pol->budget, best->name, best_price);
			break;
		}
		b->budget_noted = false;
		i = inst_add(b);
		if (cnl_id_new(&b->api->ids, "cin", now, i->id, sizeof(i->id)) <
		    0) {
			b->n--;
			break;
		}
		copy(i->account, sizeof(i->account), acct_id);
		snprintf(i->node, sizeof(i->node), "cloud-%s",
		         i->id + strlen("cin_"));
		for (char *p = i->node; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		copy(i->cluster, sizeof(i->cluster), cluster);
		copy(i->type, sizeof(i->type), best->name);
		copy(i->model, sizeof(i->model), best->model);
		copy(i->reason, sizeof(i->reason), why);
		i->gpus = best->gpus;
		i->price_h = best_price;
		i->st = I_LAUNCHING;
		i->jobs = json_array();
		json_array_append(i->jobs, json_object_get(j, "id"));
		/* A dearer type of the same GPUs may be tried: no dearer
		 * than the budget affords. */
		i->max_price =
		    (pol->budget - spent) * 3600.0 / LAUNCH_WORTH_S - rate;
		markets(b, pol, acct, j, best, i, now);
		if (i->nplan == 0) {
			inst_free(i);
			b->n--;
			continue;
		}
		/* The budget counts the dearest it may launch. */
		{
			double dear = best_price;

			for (int x = 0; x < i->nplan; x++)
				if (i->plan_price[x] > dear &&
				    i->plan_price[x] <= i->max_price)
					dear = i->plan_price[x];
			rate += dear;
		}
		planned[np].ix = (size_t)(i - b->in);
		planned[np].room = 100.0 * best->gpus - need;
		np++;
		excess -= need;
	}
	/* Record each, its join token, and its node made known, before any
	 * call; each job it is for counts a try. */
	for (int p = 0; p < np; p++) {
		struct inst *i = &b->in[planned[p].ix];
		char token[CNL_API_NODE_SECRET_MAX];
		size_t x;
		json_t *jv;

		snprintf(i->token, sizeof(i->token), "%s", i->id);
		if (cnl_api_join_token_make(b->api->store, i->node, now,
		                            b->cfg.boot_ms, token) < 0 ||
		    save(b, i, now, true) < 0) {
			i->st = I_FAILED;
			continue;
		}
		json_array_foreach (i->jobs, x, jv)
			json_object_set_new(
			    b->tries, json_string_value(jv),
			    json_integer(json_integer_value(json_object_get(
			                     b->tries, json_string_value(jv))) +
			                 1));
		cnl_ctl_cloud_node(b->api->ctl, i->node, i->cluster,
		                   i->price_h);
		snprintf(i->user_data, sizeof(i->user_data),
		         "#!/bin/sh\n"
		         "# CNLab burst instance %s: cnlab-agent joins cluster "
		         "%s as node %s\n"
		         "export CNLAB_AGENT_TOKEN='%s'\n"
		         "exec '%s' --server '%s' --name '%s' --cluster '%s'\n",
		         i->id, i->cluster, i->node, token, b->cfg_agent,
		         b->cfg_url, i->node, i->cluster);
		explicit_bzero(token, sizeof(token));
		i->do_launch = true;
	}
}

/* Under the lock: joins, idleness, budget, return; then the plan. */
static void decide(struct cnl_burst *b, int64_t now)
{
	struct policy pol;
	bool have = read_policy(b, &pol);
	json_t *view, *acct = NULL;
	char acct_id[CNL_ID_MAX] = "", err[256];
	double spent = b->closed, rate = 0, owned_free = 0;
	bool owned_low = true, cloud_only = false;
	size_t k;
	json_t *c;

	/* Nothing to do without a policy that launches and without
	 * instances: the queue is not even looked at. */
	if ((!have || !pol.enabled || !b->cfg_image[0]) && b->n == 0) {
		cnl_ctl_cloud_offer(b->api->ctl, NULL, 0);
		return;
	}
	view = cnl_ctl_burst_view(b->api->ctl, now);

	json_array_foreach (json_object_get(view, "pending"), k, c)
		cloud_only |= json_is_true(json_object_get(c, "nowhere")) &&
		              !json_is_true(json_object_get(c, "on_prem_only"));
	/* Tries are kept for work still waiting only. */
	{
		const char *id;
		json_t *v, *pending = json_object();
		void *it;

		json_array_foreach (json_object_get(view, "pending"), k, c)
			json_object_set(
			    pending,
			    json_string_value(json_object_get(c, "id")),
			    json_true());
		json_object_foreach_safe (b->tries, it, id, v) {
			if (!json_object_get(pending, id))
				json_object_del(b->tries, id);
		}
		json_decref(pending);
	}

	json_array_foreach (json_object_get(view, "clusters"), k, c) {
		double cap = json_number_value(json_object_get(c, "capacity")),
		       used = json_number_value(json_object_get(c, "used"));
		const char *name =
		    json_string_value(json_object_get(c, "name"));
		size_t x;
		json_t *j;

		if (json_is_true(json_object_get(c, "cloud")) || cap <= 0)
			continue;
		/* In use now well under the threshold (the forecast
		 * launches; what is used now returns, with a margin against
		 * flapping), and nothing waiting there. */
		if (used / cap >= pol.threshold - RETURN_MARGIN)
			owned_low = false;
		owned_free += cap - used;
		json_array_foreach (json_object_get(view, "pending"), x, j)
			if (strcmp(json_string_value(
			               json_object_get(j, "cluster")),
			           name) == 0)
				owned_low = false;
	}
	for (size_t q = 0; q < b->n; q++) {
		struct inst *i = &b->in[q];
		const json_t *vn = view_node(view, i->node);
		const char *vs =
		    vn ? json_string_value(json_object_get(vn, "state")) : "";
		bool busy = vn && json_is_true(json_object_get(vn, "busy")),
		     wanted = false;
		size_t x;
		json_t *j;

		if (i->st == I_BOOTING && vn && strcmp(vs, "lost") != 0) {
			i->st = I_RUNNING;
			i->joined_ms = now;
			save(b, i, now, false);
			cnl_api_audit_as(
			    b->api, "burst", "cloud.joined", i->node, now,
			    "joined cluster %s %.0f s after launch (%s)",
			    i->cluster, (double)(now - i->launched_ms) / 1000.0,
			    i->id);
		}
		if (i->st == I_BOOTING && now - i->launched_ms > b->cfg.boot_ms)
			fence(b, i, now,
			      "its agent never joined within the boot time");
		if ((i->st == I_RUNNING || i->st == I_DRAINING) &&
		    strcmp(vs, "lost") == 0)
			fence(b, i, now, "its agent went silent");
		if ((i->st == I_RUNNING || i->st == I_DRAINING) && busy) {
			/* Work that resumes from its checkpoint comes back
			 * now, as much as the owned GPUs have room for. */
			json_t *back = json_array();
			size_t bx;
			json_t *bj;

			cnl_ctl_cloud_return(b->api->ctl, i->node,
			                     have && owned_low && owned_free > 0
			                         ? (int64_t)owned_free
			                         : -1,
			                     now, back);
			json_array_foreach (back, bx, bj) {
				cnl_api_audit_as(
				    b->api, "burst", "job.cloud_return",
				    json_string_value(bj), now,
				    "requeued from cloud node %s to come "
				    "back to owned GPUs (its checkpoint "
				    "travels, if it keeps one)",
				    i->node);
				owned_free = 0; /* one node's worth a tick */
			}
			json_decref(back);
		}
		/* Nothing new goes out to it once owned GPUs could take
		 * all it runs, and no work only the cloud can run waits. */
		if (i->st == I_RUNNING && have && owned_low && busy &&
		    !cloud_only &&
		    cnl_ctl_cloud_movable(b->api->ctl, i->node)) {
			json_t *st = NULL;

			if (cnl_ctl_node_set_state(b->api->ctl, i->node,
			                           "cordoned", &st, err,
			                           sizeof(err)) == 200) {
				i->st = I_DRAINING;
				save(b, i, now, false);
				cnl_api_audit_as(
				    b->api, "burst", "cloud.drain", i->node,
				    now,
				    "cordoned: owned GPUs below %.2f again; "
				    "its work finishes, no new work",
				    pol.threshold - RETURN_MARGIN);
			}
			json_decref(st);
		}
		/* Idle: nothing on it, and (unless draining) no work that
		 * may leave waits for its GPUs. */
		json_array_foreach (json_object_get(view, "pending"), x, j)
			wanted |=
			    i->st == I_RUNNING && may_leave(j, i->cluster) &&
			    serves(i, j) &&
			    (json_is_true(json_object_get(j, "nowhere")) ||
			     strcmp(json_string_value(
			                json_object_get(j, "cluster")),
			            i->cluster) == 0);
		if ((i->st == I_RUNNING || i->st == I_DRAINING) && !busy &&
		    !wanted) {
			if (!i->idle_ms)
				i->idle_ms = now;
			if (now - i->idle_ms >= b->cfg.idle_ms)
				fence(b, i, now, "idle");
		} else {
			i->idle_ms = 0;
		}
		spent += cost_of(i, now);
		if (i->st <= I_ENDING)
			rate += i->price_h;
	}
	/* The budget, a hard stop. */
	if (have && rate > 0 &&
	    spent + rate * BUDGET_AHEAD_S / 3600.0 >= pol.budget) {
		if (!b->exhausted)
			cnl_api_audit_as(
			    b->api, "burst", "cloud.budget", "policy:burst",
			    now,
			    "budget exhausted: %.4f of %.4f spent at %.4f/h; "
			    "every instance given back",
			    spent, pol.budget, rate);
		b->exhausted = true;
		for (size_t q = 0; q < b->n; q++)
			fence(b, &b->in[q], now, "the cloud budget is spent");
	} else if (have && b->exhausted &&
	           spent + LAUNCH_WORTH_S / 3600.0 < pol.budget) {
		b->exhausted = false; /* raised, or a new policy */
	}
	/* What admission may count on: the account's types while the
	 * policy may launch (a pause after an outage included). */
	cnl_ctl_cloud_offer(b->api->ctl, NULL, 0);
	if (have && pol.enabled && !b->exhausted && b->cfg_image[0]) {
		struct cnl_cloud *cl = NULL;

		cnl_api_cloud_account(b->api, pol.provider, acct_id,
		                      sizeof(acct_id), &acct);
		if (acct && b->auth_failed &&
		    strcmp(b->auth_account, acct_id) != 0)
			b->auth_failed = false; /* another account now */
		if (acct && !b->auth_failed)
			cl = provider_of(b, acct_id, now);
		if (cl) {
			cnl_api_cloud_offer(b->api, pol.provider, acct);
			if (now >= b->backoff_until)
				plan(b, &pol, view, acct, acct_id, now);
		}
	}
	/* Each record's provider (its own account's, whatever the policy
	 * says now), what to terminate. */
	for (size_t q = 0; q < b->n; q++) {
		struct inst *i = &b->in[q];

		i->cl =
		    i->st <= I_ENDING ? provider_of(b, i->account, now) : NULL;
	}
	json_decref(acct);
	json_decref(view);
}

/* One launch of record @i through its plan; its answer in i->got_*,
 * i->rc and i->err.  False after an outage, throttling or refused
 * credentials: no more launches this tick. */
static bool launch_one(struct cnl_burst *b, struct inst *i, int64_t until)
{
	struct cnl_cloud *cl = i->cl;

	i->rc = -EAGAIN;
	i->tried = -1;
	i->got_instance[0] = '\0';
	i->err = (struct cnl_cloud_error){.kind = CNL_CLOUD_UNAVAILABLE};
	snprintf(i->err.code, sizeof(i->err.code), "NotTried");
	for (int p = 0; p < i->nplan; p++) {
		bool spot = strcmp(i->plan[p][1], "spot") == 0;
		char token[96];
		double sp = 0;
		struct cnl_cloud_tag tags[] = {{"cnlab:node", i->node},
		                               {"cnlab:record", i->id},
		                               {"cnlab:cluster", i->cluster}};
		struct cnl_cloud_launch l = {
		    .instance_type = i->plan[p][0],
		    .market = spot ? CNL_CLOUD_SPOT : CNL_CLOUD_ON_DEMAND,
		    .count = 1,
		    .image = b->cfg_image,
		    .user_data = i->user_data,
		    .tags = tags,
		    .ntags = CNL_ARRAY_SIZE(tags),
		    .client_token = token};
		struct cnl_cloud_instance got;
		size_t n = 0;

		/* The budget allows no dearer type than this. */
		if (i->plan_price[p] > i->max_price)
			continue;
		if (cnl_time_now_ms() >= until)
			return false; /* the tick's time is spent */
		snprintf(token, sizeof(token), "%s-%d", i->id, p);
		i->got_price = i->plan_price[p];
		i->tried = p;
		if (spot && cl->ops->spot_price &&
		    cl->ops->spot_price(cl, i->plan[p][0], &sp, &i->err) == 0 &&
		    sp > 0 && sp < i->got_price)
			i->got_price = sp;
		i->rc = cl->ops->provision(cl, &l, &got, 1, &n, &i->err);
		/* Launched, even where the answer could not all be read
		 * (cloud.h: listed instances are launched). */
		if (n == 1 && got.id[0] && (i->rc == 0 || i->rc == -EPROTO)) {
			i->rc = 0;
			copy(i->got_instance, sizeof(i->got_instance), got.id);
			copy(i->got_type, sizeof(i->got_type), i->plan[p][0]);
			copy(i->got_token, sizeof(i->got_token), token);
			i->got_spot = spot;
			return true;
		}
		if (i->rc == 0) { /* an answer without the instance */
			i->rc = -EPROTO;
			i->err.kind = CNL_CLOUD_PROTOCOL;
		}
		if (i->err.kind != CNL_CLOUD_CAPACITY &&
		    i->err.kind != CNL_CLOUD_INVALID)
			return false; /* outage, throttling, auth, protocol */
		/* This type in this market: none now. */
		copy(i->plan[p][1], 64, spot ? "spot!" : "on-demand!");
	}
	return true;
}

/* Off the lock: the provider's calls (launches, and what is live). */
static void act(struct cnl_burst *b, bool describe,
                struct cnl_cloud_instance *seen, size_t *nseen)
{
	/* An outage (each call retried for a while) must not keep the
	 * budget and the idle checks waiting: no new call after this.
	 * (Terminations are the reaper's.) */
	int64_t until = cnl_time_now_ms() + ACT_MAX_MS;
	bool launching = true;

	for (size_t q = 0; q < b->n; q++) {
		struct inst *i = &b->in[q];

		if (!i->do_launch)
			continue;
		if (!launching || !i->cl || cnl_time_now_ms() >= until) {
			i->rc = -EAGAIN;
			i->tried = -1;
			i->err = (struct cnl_cloud_error){
			    .kind = CNL_CLOUD_UNAVAILABLE};
			snprintf(i->err.code, sizeof(i->err.code), "NotTried");
		} else {
			launching = launch_one(b, i, until);
		}
		explicit_bzero(i->user_data, sizeof(i->user_data));
	}
	/* Launches cnlabd stopped in the middle of (or whose answers never
	 * came): the account's instances, found by their record's tag. */
	for (size_t q = 0; q < b->n; q++) {
		struct inst *i = &b->in[q];
		struct cnl_cloud_instance *all;
		struct cnl_cloud_error e;
		size_t na = 0;

		if (!i->recover || !i->cl || cnl_time_now_ms() >= until)
			continue;
		all = cnl_xcalloc(256, sizeof(*all));
		if (i->cl->ops->describe(i->cl, NULL, 0, all, 256, &na, &e) ==
		    0) {
			i->got_instance[0] = '\0';
			for (size_t y = 0; y < na; y++)
				if (strcmp(all[y].record, i->id) == 0 &&
				    strcmp(all[y].state, "terminated") != 0)
					copy(i->got_instance,
					     sizeof(i->got_instance),
					     all[y].id);
			/* None yet: EC2 may list a launch a little late. */
			i->recovered = i->got_instance[0] ||
			               cnl_time_now_ms() - i->recorded_ms >=
			                   RECOVER_WAIT_MS;
		}
		free(all);
	}
	/* The live instances, per provider. */
	*nseen = 0;
	for (size_t q = 0; describe && q < b->n && cnl_time_now_ms() < until;
	     q++) {
		struct cnl_cloud *cl = b->in[q].cl;
		const char *ids[MAX_LIVE];
		struct cnl_cloud_error e;
		size_t nid = 0, got = 0;
		bool first = true;

		for (size_t x = 0; x < q && first; x++)
			first = b->in[x].cl != cl;
		if (!cl || !first)
			continue;
		for (size_t x = q; x < b->n && nid < MAX_LIVE; x++) {
			const struct inst *i = &b->in[x];

			if (i->cl == cl && i->instance[0] &&
			    (i->st == I_BOOTING || i->st == I_RUNNING ||
			     i->st == I_DRAINING))
				ids[nid++] = i->instance;
		}
		if (nid && *nseen < MAX_LIVE &&
		    cl->ops->describe(cl, ids, nid, seen + *nseen,
		                      MAX_LIVE - *nseen, &got, &e) == 0)
			*nseen += got;
	}
}

/* A launch that failed (@what came of it): audited, and logged with the
 * provider's words. */
static void launch_failed(struct cnl_burst *b, const struct inst *i,
                          int64_t now, const char *what)
{
	cnl_api_audit_as(b->api, "burst", "cloud.launch", i->node, now,
	                 "launch failed (%s %s, %d calls); %s",
	                 cnl_cloud_fail_name(i->err.kind), i->err.code,
	                 i->err.attempts, what);
	cnl_log(CNL_LOG_WARN, "cloud launch failed",
	        "node=%s kind=%s code=%s msg=\"%s\" then=\"%s\"", i->node,
	        cnl_cloud_fail_name(i->err.kind), i->err.code, i->err.message,
	        what);
}

/* Launches pause: 5 s, doubling to 5 min while failures go on. */
static void back_off(struct cnl_burst *b, int64_t now)
{
	b->backoff_ms = b->backoff_ms ? 2 * b->backoff_ms : BACKOFF_MIN_MS;
	if (b->backoff_ms > BACKOFF_MAX_MS)
		b->backoff_ms = BACKOFF_MAX_MS;
	b->backoff_until = now + b->backoff_ms;
}

/* Under the lock again: what came of the calls. */
static void settle(struct cnl_burst *b, int64_t now,
                   const struct cnl_cloud_instance *seen, size_t nseen)
{
	for (size_t q = 0; q < b->n; q++) {
		struct inst *i = &b->in[q];

		if (i->recovered) {
			i->recover = i->recovered = false;
			if (i->got_instance[0]) {
				/* Launched: paid for since it was recorded;
				 * its join token died with the boot time, so
				 * it is given back. */
				copy(i->instance, sizeof(i->instance),
				     i->got_instance);
				i->launched_ms = i->recorded_ms;
				/* Booting, recorded: should the fence fail,
				 * the usual paths (boot time, idle) end it. */
				i->st = I_BOOTING;
				save(b, i, now, false);
				fence(b, i, now,
				      "its launch's answer never came; found "
				      "by its tag");
			} else {
				struct cnl_store *s = b->api->store;

				/* Never launched: its join token dies. */
				if (cnl_store_tx_begin(s) < 0 ||
				    cnl_api_node_forget(s, i->node) < 0 ||
				    cnl_store_tx_commit(s) < 0) {
					cnl_store_tx_rollback(s);
					i->recover = true; /* again later */
					continue;
				}
				cnl_ctl_node_revoke(b->api->ctl, i->node, now);
				i->st = I_FAILED;
				i->ended_ms = now;
				copy(i->reason, sizeof(i->reason),
				     "its launch's answer never came; EC2 "
				     "has no such instance");
				save(b, i, now, false);
				cnl_api_audit_as(
				    b->api, "burst", "cloud.return", i->node,
				    now,
				    "no instance: its launch's answer never "
				    "came, and none carries its tag");
			}
		}
		if (i->do_launch) {
			i->do_launch = false;
			for (int p = 0; p < i->nplan; p++)
				if (strchr(i->plan[p][1], '!'))
					set_nocap(b, i->plan[p][0],
					          strncmp(i->plan[p][1], "spot",
					                  4) == 0,
					          now);
			if (i->rc == 0) {
				size_t x;
				json_t *j;

				copy(i->instance, sizeof(i->instance),
				     i->got_instance);
				/* Its type (perhaps a dearer one of the same
				 * GPUs) at the account's price, or spot's. */
				copy(i->type, sizeof(i->type), i->got_type);
				if (i->got_price > 0)
					i->price_h = i->got_price;
				copy(i->token, sizeof(i->token), i->got_token);
				i->spot = i->got_spot;
				i->st = I_BOOTING;
				i->launched_ms = now;
				save(b, i, now, false);
				b->launches++;
				b->backoff_ms = 0;
				char tried[200] = "";

				for (int p = 0; p < i->nplan; p++)
					if (strchr(i->plan[p][1], '!'))
						snprintf(
						    tried + strlen(tried),
						    sizeof(tried) -
						        strlen(tried),
						    "%s%s %.*s",
						    tried[0]
						        ? ", "
						        : "; no capacity: ",
						    i->plan[p][0],
						    (int)strlen(i->plan[p][1]) -
						        1,
						    i->plan[p][1]);
				cnl_api_audit_as(
				    b->api, "burst", "cloud.launch", i->node,
				    now, "launched %s %s %s %.4f/h: %s%s",
				    i->type, i->instance,
				    i->spot ? "spot" : "on-demand", i->price_h,
				    i->reason, tried);
				json_array_foreach (i->jobs, x, j)
					cnl_api_audit_as(
					    b->api, "burst", "job.cloud_burst",
					    json_string_value(j), now,
					    "to the cloud: %s %s %.4f/h "
					    "launched for it: %s",
					    i->type,
					    i->spot ? "spot" : "on-demand",
					    i->price_h, i->reason);
			} else if (i->tried < 0) {
				/* Never asked (the tick's time was spent, or
				 * an outage came first): as if never
				 * planned. */
				struct cnl_store *s = b->api->store;
				size_t x;
				json_t *j;

				json_array_foreach (i->jobs, x, j) {
					const char *id = json_string_value(j);
					json_int_t n = json_integer_value(
					    json_object_get(b->tries, id));

					if (n > 0)
						json_object_set_new(
						    b->tries, id,
						    json_integer(n - 1));
				}
				if (cnl_store_tx_begin(s) < 0 ||
				    cnl_api_node_forget(s, i->node) < 0 ||
				    cnl_store_tx_commit(s) < 0)
					cnl_store_tx_rollback(s);
				i->st = I_FAILED;
				i->ended_ms = now;
				copy(i->reason, sizeof(i->reason),
				     "not tried: planned again");
				save(b, i, now, false);
			} else if (i->err.attempts > 0 &&
			           (i->err.kind == CNL_CLOUD_UNAVAILABLE ||
			            i->err.kind == CNL_CLOUD_PROTOCOL)) {
				/* Asked, never answered: EC2 may have
				 * launched it (what was asked: its type,
				 * market and price).  Looked for by its tag
				 * until the provider answers (act()). */
				b->launch_fails++;
				copy(i->type, sizeof(i->type),
				     i->plan[i->tried][0]);
				i->spot = strncmp(i->plan[i->tried][1], "spot",
				                  4) == 0;
				if (i->got_price > 0)
					i->price_h = i->got_price;
				i->recover = true;
				i->recorded_ms = now;
				save(b, i, now, false);
				back_off(b, now);
				launch_failed(b, i, now,
				              "looked for by its tag");
			} else {
				struct cnl_store *s = b->api->store;

				b->launch_fails++;
				launch_failed(b, i, now, "no instance");
				if (i->err.kind == CNL_CLOUD_UNAVAILABLE ||
				    i->err.kind == CNL_CLOUD_THROTTLED ||
				    i->err.kind == CNL_CLOUD_PROTOCOL) {
					back_off(b, now);
				} else if (i->err.kind == CNL_CLOUD_AUTH) {
					b->auth_failed = true;
					copy(b->auth_account,
					     sizeof(b->auth_account),
					     i->account);
				}
				if (cnl_store_tx_begin(s) < 0 ||
				    cnl_api_node_forget(s, i->node) < 0 ||
				    cnl_store_tx_commit(s) < 0)
					cnl_store_tx_rollback(s);
				i->st = I_FAILED;
				i->ended_ms = now;
				copy(i->reason, sizeof(i->reason),
				     cnl_cloud_fail_name(i->err.kind));
				save(b, i, now, false);
			}
		}
		for (size_t x = 0; x < nseen; x++) {
			const struct cnl_cloud_instance *c = &seen[x];

			if (strcmp(c->id, i->instance) != 0 ||
			    (i->st != I_BOOTING && i->st != I_RUNNING &&
			     i->st != I_DRAINING))
				continue;
			if (c->interrupted ||
			    strcmp(c->state, "shutting-down") == 0 ||
			    strcmp(c->state, "terminated") == 0 ||
			    strcmp(c->state, "stopped") == 0) {
				if (c->interrupted)
					b->interruptions++;
				fence(b, i, now,
				      c->interrupted
				          ? "spot interruption: its work is "
				            "requeued"
				          : "the provider ended it");
				/* Ended already: nothing to terminate (once
				 * fenced; else tried again). */
				if (i->st == I_ENDING &&
				    strcmp(c->state, "terminated") == 0) {
					ended(
					    b, i, now,
					    c->interrupted
					        ? "was interrupted"
					        : "was ended by the provider");
				}
			}
		}
	}
	compact(b);
}

static void *loop(void *arg)
{
	struct cnl_burst *b = arg;
	struct cnl_cloud_instance *seen = cnl_xcalloc(MAX_LIVE, sizeof(*seen));

	while (!atomic_load(&b->stop)) {
		int64_t now = cnl_time_now_ms();
		size_t nseen = 0;
		bool describe;

		pthread_mutex_lock(&b->api->mu);
		decide(b, now);
		describe = now - b->describe_ms >= DESCRIBE_EVERY_MS;
		pthread_mutex_unlock(&b->api->mu);
		/* These providers are used only by this thread (the
		 * reaper has its own); the lock is not held while they wait
		 * for the network. */
		act(b, describe, seen, &nseen);
		if (describe)
			b->describe_ms = now;
		pthread_mutex_lock(&b->api->mu);
		settle(b, cnl_time_now_ms(), seen, nseen);
		pthread_mutex_unlock(&b->api->mu);
		for (int64_t t = 0;
		     t < b->cfg.interval_ms && !atomic_load(&b->stop); t += 50)
			nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
	}
	free(seen);
	return NULL;
}

/* The reaper's provider for account @id (its own, opened once, under the
 * lock); NULL when it cannot be opened (the loop audits that). */
static struct cnl_cloud *reaper_provider(struct cnl_burst *b, const char *id)
{
	struct cnl_cloud *c = NULL;
	char err[256];

	for (size_t k = 0; k < b->nrprov; k++)
		if (strcmp(b->rprov[k].account, id) == 0)
			return b->rprov[k].c;
	if (b->nrprov == CNL_ARRAY_SIZE(b->rprov) ||
	    cnl_api_cloud_open(b->api, id, &c, err, sizeof(err)) < 0)
		return NULL;
	copy(b->rprov[b->nrprov].account, CNL_ID_MAX, id);
	b->rprov[b->nrprov++].c = c;
	return c;
}

/* The reaper: every instance given back (fenced: I_ENDING) terminated,
 * its call off the lock, then recorded as ended; a failure is tried again
 * the next round. */
static void *reaper(void *arg)
{
	struct cnl_burst *b = arg;

	while (!atomic_load(&b->stop)) {
		struct {
			char id[CNL_ID_MAX];
			char instance[CNL_CLOUD_ID_MAX];
			struct cnl_cloud *cl;
			struct cnl_cloud_error err;
			int rc;
		} job[8];
		size_t nj = 0;

		pthread_mutex_lock(&b->api->mu);
		for (size_t q = 0; q < b->n && nj < CNL_ARRAY_SIZE(job); q++) {
			struct inst *i = &b->in[q];
			struct cnl_cloud *cl;

			if (i->st != I_ENDING || i->reaping ||
			    !i->instance[0] ||
			    !(cl = reaper_provider(b, i->account)))
				continue;
			i->reaping = true;
			copy(job[nj].id, CNL_ID_MAX, i->id);
			copy(job[nj].instance, CNL_CLOUD_ID_MAX, i->instance);
			job[nj++].cl = cl;
		}
		pthread_mutex_unlock(&b->api->mu);
		for (size_t k = 0; k < nj; k++)
			job[k].rc = job[k].cl->ops->terminate(
			    job[k].cl, (const char *const[]){job[k].instance},
			    1, &job[k].err);
		pthread_mutex_lock(&b->api->mu);
		for (size_t k = 0; k < nj; k++)
			for (size_t q = 0; q < b->n; q++) {
				struct inst *i = &b->in[q];

				if (strcmp(i->id, job[k].id) != 0)
					continue;
				i->reaping = false;
				if (i->st != I_ENDING)
					break; /* ended meanwhile */
				if (job[k].rc == 0)
					ended(b, i, cnl_time_now_ms(),
					      "terminated");
				else
					cnl_log(
					    CNL_LOG_WARN,
					    "cannot terminate a cloud "
					    "instance; retried",
					    "instance=%s kind=%s msg=\"%s\"",
					    i->instance,
					    cnl_cloud_fail_name(
					        job[k].err.kind),
					    job[k].err.message);
				break;
			}
		pthread_mutex_unlock(&b->api->mu);
		for (int64_t t = 0;
		     t < b->cfg.interval_ms && !atomic_load(&b->stop); t += 50)
			nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
	}
	return NULL;
}

void cnl_burst_set_url(struct cnl_burst *b, const char *url)
{
	copy(b->cfg_url, sizeof(b->cfg_url), url);
}

int cnl_burst_start(struct cnl_burst *b)
{
	int r = pthread_create(&b->th, NULL, loop, b);

	if (r)
		return -r;
	b->started = true;
	if ((r = pthread_create(&b->reaper, NULL, reaper, b))) {
		cnl_burst_stop(b);
		return -r;
	}
	b->reaper_started = true;
	return 0;
}

void cnl_burst_stop(struct cnl_burst *b)
{
	if (!b || !b->started)
		return;
	atomic_store(&b->stop, true);
	pthread_join(b->th, NULL);
	if (b->reaper_started)
		pthread_join(b->reaper, NULL);
	b->started = b->reaper_started = false;
}

void cnl_burst_free(struct cnl_burst *b)
{
	if (!b)
		return;
	cnl_burst_stop(b);
	for (size_t i = 0; i < b->n; i++)
		inst_free(&b->in[i]);
	free(b->in);
	for (size_t k = 0; k < b->nprov; k++)
		cnl_cloud_free(b->prov[k].c);
	for (size_t k = 0; k < b->nrprov; k++)
		cnl_cloud_free(b->rprov[k].c);
	json_decref(b->tries);
	free(b);
}

void cnl_burst_metrics(struct cnl_burst *b, struct cnl_metrics_buf *mb)
{
	int64_t now = cnl_time_now_ms();
	double spent = b->closed;
	int by[I_FAILED + 1] = {0};
	struct policy pol;
	bool have = read_policy(b, &pol);

	for (size_t i = 0; i < b->n; i++) {
		spent += cost_of(&b->in[i], now);
		by[b->in[i].st]++;
	}
	cnl_mb_family(mb, "cnlab_cloud_instances", "gauge",
	              "Cloud instances the burst holds, by state.");
	for (int s = I_LAUNCHING; s <= I_ENDING; s++)
		cnl_mb_printf(mb, "cnlab_cloud_instances{state=\"%s\"} %d\n",
		              ist_names[s], by[s]);
	cnl_mb_family(mb, "cnlab_cloud_spend", "gauge",
	              "What cloud instances have cost so far (USD), at "
	              "their price per second of life.");
	cnl_mb_printf(mb, "cnlab_cloud_spend %.6f\n", spent);
	cnl_mb_family(mb, "cnlab_cloud_budget", "gauge",
	              "The burst policy's budget (USD); 0 without a policy.");
	cnl_mb_printf(mb, "cnlab_cloud_budget %.6f\n", have ? pol.budget : 0);
	cnl_mb_family(mb, "cnlab_cloud_budget_exhausted", "gauge",
	              "1 while the budget stops all bursting (a warning).");
	cnl_mb_printf(mb, "cnlab_cloud_budget_exhausted %d\n",
	              b->exhausted ? 1 : 0);
	cnl_mb_family(mb, "cnlab_cloud_launches_total", "counter",
	              "Cloud instances launched, and launches that failed.");
	cnl_mb_printf(mb,
	              "cnlab_cloud_launches_total{result=\"ok\"} %" PRIu64 "\n",
	              b->launches);
	cnl_mb_printf(
	    mb, "cnlab_cloud_launches_total{result=\"failed\"} %" PRIu64 "\n",
	    b->launch_fails);
	cnl_mb_family(mb, "cnlab_cloud_interruptions_total", "counter",
	              "Spot instances the provider interrupted.");
	cnl_mb_printf(mb, "cnlab_cloud_interruptions_total %" PRIu64 "\n",
	              b->interruptions);
}
