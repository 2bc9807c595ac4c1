/*
 * mirror.c - the leader's live statuses, mirrored in the database
 * (mirror.h).
 *
 * One thread: every CNL_MIRROR_MS it takes the ids the facts index set or
 * removed since (cnl_ctl_facts_changed()), adds them to what is still to
 * write, reads each one's status as it stands now (so that a set, a
 * removal and a set again write once, the last) and writes them all in
 * one transaction; on failure they stay to write, with what changes
 * meanwhile.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/ctl.h"
#include "server/mirror.h"
#include "store/store.h"
#include "wire/job.h"

/* A failing write is logged at most this often. */
#define LOG_EVERY_MS (30 * 1000)

struct cnl_mirror {
	struct cnl_ctl *ctl;
	struct cnl_store *peer;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

/* The changes to write for @todo's ids: each one's status now, or null. */
static char *changes(struct cnl_mirror *m, json_t *todo)
{
	json_t *o = json_object(), *v;
	const char *id;
	char *text;

	json_object_foreach (todo, id, v) {
		struct cnl_wire_status st;

		json_object_set_new(o, id,
		                    cnl_ctl_facts_status(m->ctl, id, &st) == 0
		                        ? cnl_wire_status_encode(&st)
		                        : json_null());
	}
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return text;
}

static void *run(void *arg)
{
	struct cnl_mirror *m = arg;
	json_t *todo = json_object();
	bool reset = true;
	int64_t logged = 0;

	for (;;) {
		struct timespec ts;
		char(*ids)[CNL_ID_MAX] = NULL;
		size_t n;
		char *text;
		int r;

		cnl_time_deadline(&ts, CLOCK_MONOTONIC, CNL_MIRROR_MS);
		pthread_mutex_lock(&m->mu);
		if (!m->stop)
			pthread_cond_timedwait(&m->cv, &m->mu, &ts);
		if (m->stop) {
			pthread_mutex_unlock(&m->mu);
			break;
		}
		pthread_mutex_unlock(&m->mu);
		/* The first write replaces the last leader's rows: only once
		 * the index holds every active workload. */
		if (!cnl_ctl_facts_ready(m->ctl))
			continue;
		n = cnl_ctl_facts_changed(m->ctl, &ids);
		for (size_t i = 0; i < n; i++)
			json_object_set_new(todo, ids[i], json_true());
		free(ids);
		if (!reset && json_object_size(todo) == 0)
			continue;
		if (!(text = changes(m, todo)))
			continue;
		r = cnl_store_live_put(m->peer, reset, text);
		free(text);
		if (r == 0) {
			json_object_clear(todo);
			reset = false;
		} else if (cnl_time_now_ms() - logged >= LOG_EVERY_MS) {
			logged = cnl_time_now_ms();
			cnl_log(CNL_LOG_WARN, "cannot mirror live statuses",
			        "err=%s pending=%zu why=\"%s\"", cnl_errname(r),
			        json_object_size(todo),
			        cnl_store_errmsg(m->peer));
		}
	}
	json_decref(todo);
	return NULL;
}

int cnl_mirror_start(struct cnl_ctl *ctl, struct cnl_store *store,
                     struct cnl_mirror **ret)
{
	struct cnl_mirror *m;
	pthread_condattr_t ca;
	int r;

	*ret = NULL;
	m = cnl_xcalloc(1, sizeof(*m));
	if ((r = cnl_store_open_peer(store, &m->peer)) < 0) {
		free(m);
		return r;
	}
	m->ctl = ctl;
	pthread_mutex_init(&m->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cv, &ca);
	pthread_condattr_destroy(&ca);
	cnl_ctl_facts_track(ctl);
	if ((r = pthread_create(&m->thread, NULL, run, m)) != 0) {
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
		cnl_store_close(m->peer);
		free(m);
		return -r;
	}
	(void)pthread_setname_np(m->thread, "cnl-mirror");
	*ret = m;
	return 0;
}

void cnl_mirror_stop(struct cnl_mirror *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = true;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->thread, NULL);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	cnl_store_close(m->peer);
	free(m);
}
