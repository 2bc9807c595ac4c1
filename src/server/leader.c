/*
 * leader.c - the leader's lease for several cnlabd over one PostgreSQL
 * (leader.h): the standby's wait, the renewal thread, the step-down.
 *
 * The renewal runs on a store handle of its own (a handle serves one
 * thread), every fifth of the lease counted from the start of the last
 * one, so that four may fail, or one take most of the lease (a machine
 * so loaded that the database's answer takes seconds), before the lease
 * runs out.  It never writes anything but the lease row.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/leader.h"

struct cnl_leader {
	struct cnl_store *store; /* the renewals' own handle */
	/* Monotonic ms until which the lease is surely still ours: the
	 * start of the last successful acquire or renewal plus the lease
	 * (the server counts from later).  Past it this process may no
	 * longer lead and must not claim to (cnl_leader_valid()). */
	_Atomic int64_t valid_until;
	char holder[CNL_STORE_LEASE_HOLDER_MAX];
	int64_t epoch;
	int64_t ttl_ms;
	pthread_t thread;
	bool running;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

/* Who leads, as the standby's wait last read it, for the follower's
 * listener: the leader's label only (its replica URL), not its host name
 * or pid. */
static struct {
	pthread_mutex_t mu;
	char leader[CNL_STORE_LEASE_HOLDER_MAX];
	int64_t epoch;
	int64_t read_ms;    /* monotonic, when it was read; 0: never */
	int64_t expires_ms; /* monotonic, when that lease runs out */
} seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int64_t mono_ms(void)
{
	return cnl_time_mono_ns() / 1000000;
}

/* @l as read at monotonic @t0 (the start of the read: its expiry is
 * counted from there, never later than the database's). */
static void note_seen(const struct cnl_store_lease *l, int64_t t0)
{
	const char *cut = strstr(l->holder, " host=");
	size_t n = cut ? (size_t)(cut - l->holder) : strlen(l->holder);

	pthread_mutex_lock(&seen.mu);
	snprintf(seen.leader, sizeof(seen.leader), "%.*s", (int)n, l->holder);
	seen.epoch = l->epoch;
	seen.read_ms = mono_ms();
	seen.expires_ms = t0 + (l->expires_ms - l->now_ms);
	pthread_mutex_unlock(&seen.mu);
}

void cnl_leader_seen(struct cnl_leader_seen *ret)
{
	int64_t now = mono_ms();

	pthread_mutex_lock(&seen.mu);
	memcpy(ret->leader, seen.leader, sizeof(ret->leader));
	ret->epoch = seen.epoch;
	ret->live = seen.read_ms > 0 && seen.leader[0] && now < seen.expires_ms;
	ret->age_ms = seen.read_ms > 0 ? now - seen.read_ms : -1;
	pthread_mutex_unlock(&seen.mu);
}

static void *renewer(void *arg)
{
	struct cnl_leader *l = arg;
	bool failing = false;
	char q[CNL_LOG_QUOTE_MAX];

	int64_t next = mono_ms() + l->ttl_ms / 5;

	pthread_mutex_lock(&l->mu);
	while (!l->stop) {
		struct cnl_store_lease now;
		struct timespec ts;
		int64_t t0 = mono_ms();
		int r;

		if (t0 < next) {
			cnl_time_deadline(&ts, CLOCK_MONOTONIC, next - t0);
			if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) !=
			        ETIMEDOUT ||
			    l->stop)
				continue;
		}
		pthread_mutex_unlock(&l->mu);
		memset(&now, 0, sizeof(now));
		t0 = mono_ms();
		next = t0 + l->ttl_ms / 5;
		r = cnl_store_lease_renew(l->store, l->holder, l->epoch,
		                          l->ttl_ms, &now);
		if (r == 0)
			atomic_store(&l->valid_until, t0 + l->ttl_ms);
		if (r == -CNL_EFENCED) {
			/* Another took over: stop at once (leader.h). */
			cnl_log(CNL_LOG_ERROR,
			        "lost the leader's lease; stepping down",
			        "epoch=%" PRId64
			        " leader=%s leader_epoch=%" PRId64 " exit=%d",
			        l->epoch,
			        cnl_log_quote(q, sizeof(q), now.holder),
			        now.epoch, CNL_LEADER_LOST_EXIT);
			_exit(CNL_LEADER_LOST_EXIT);
		}
		if (r < 0 && !failing)
			cnl_log(CNL_LOG_WARN, "cannot renew the leader's lease",
			        "epoch=%" PRId64 " err=%s db=%s", l->epoch,
			        cnl_errname(r),
			        cnl_log_quote(q, sizeof(q),
			                      cnl_store_errmsg(l->store)));
		else if (r == 0 && failing)
			cnl_log(CNL_LOG_INFO, "leader's lease renewed again",
			        "epoch=%" PRId64, l->epoch);
		failing = r < 0;
		pthread_mutex_lock(&l->mu);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/*
 * A follower's pause between two reads of the lease: up to @ms, shorter
 * when the lease's holder announces a change (LISTEN/NOTIFY: a takeover
 * names the new leader to forward to at once, a release lets one take
 * over at once), in slices of 100 ms so that a signal of @sigs ends it.
 * True when one did.
 */
static bool follow_wait(struct cnl_store *store, int64_t ms,
                        const sigset_t *sigs)
{
	const struct timespec zero = {0, 0};
	int64_t end = mono_ms() + ms;
	bool hints = true;

	for (int64_t left = ms; left > 0; left = end - mono_ms()) {
		int64_t slice = left < 100 ? left : 100;
		int w = hints ? cnl_store_lease_wait(store, slice) : -1;

		if (w < 0) { /* no hints (now): just wait */
			hints = false;
			struct timespec ts = {0, (long)slice * 1000000L};

			if (sigtimedwait(sigs, NULL, &ts) > 0)
				return true;
			continue;
		}
		if (sigtimedwait(sigs, NULL, &zero) > 0)
			return true;
		if (w == 1)
			break;
	}
	return false;
}

/* "LABEL host=HOST pid=PID run=RANDOM": unique to this run. */
static void make_holder(char *buf, size_t len, const char *label)
{
	unsigned char rnd[4] = {0};
	char host[64] = "?";

	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	(void)RAND_bytes(rnd, sizeof(rnd));
	snprintf(buf, len, "%s host=%s pid=%d run=%02x%02x%02x%02x",
	         label && label[0] ? label : "cnlabd", host, (int)getpid(),
	         rnd[0], rnd[1], rnd[2], rnd[3]);
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

int cnl_leader_take(const char *url, struct cnl_store *store, const char *label,
                    int64_t ttl_ms, const sigset_t *sigs,
                    struct cnl_leader **ret, char *err, size_t errlen)
{
	struct cnl_leader *l = cnl_xcalloc(1, sizeof(*l));
	char q[CNL_LOG_QUOTE_MAX];
	int64_t seen_epoch = -1;
	int last_err = 0;
	int r;

	l->ttl_ms = ttl_ms;
	make_holder(l->holder, sizeof(l->holder), label);
	pthread_mutex_init(&l->mu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&l->cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	if ((r = cnl_store_open(url, &l->store, err, errlen)) < 0)
		goto fail;
	for (;;) {
		struct cnl_store_lease now;
		int64_t pause = ttl_ms / 4 < 1000 ? ttl_ms / 4 : 1000;

		int64_t t0 = mono_ms();

		memset(&now, 0, sizeof(now));
		r = cnl_store_lease_acquire(l->store, l->holder, ttl_ms, &now);
		if (r == -EBUSY)
			note_seen(&now, t0);
		if (r == 0) {
			l->epoch = now.epoch;
			atomic_store(&l->valid_until, t0 + ttl_ms);
			break;
		}
		if (r == -EBUSY && now.epoch != seen_epoch) {
			seen_epoch = now.epoch;
			cnl_log(CNL_LOG_INFO,
			        "following: another cnlabd leads; forwarding "
			        "to it until its "
			        "lease",
			        "leader=%s epoch=%" PRId64
			        " expires_in_ms=%" PRId64,
			        cnl_log_quote(q, sizeof(q), now.holder),
			        now.epoch, now.expires_ms - now.now_ms);
		} else if (r < 0 && r != -EBUSY && r != last_err) {
			cnl_log(CNL_LOG_WARN,
			        "following: cannot read the lease",
			        "err=%s db=%s", cnl_errname(r),
			        cnl_log_quote(q, sizeof(q),
			                      cnl_store_errmsg(l->store)));
		}
		last_err = r;
		if (follow_wait(l->store, pause, sigs)) {
			cnl_leader_free(l);
			return 1;
		}
	}
	/* A transaction idle for half the lease is ended by the server:
	 * this process, paused inside one, cannot bar a takeover. */
	if ((r = cnl_store_fence(store, l->epoch, ttl_ms / 2)) < 0) {
		cnl_seterr(err, errlen, "cannot fence the store: %s",
		           cnl_strerror(r));
		goto fail;
	}
	if ((r = -pthread_create(&l->thread, NULL, renewer, l)) < 0) {
		cnl_seterr(err, errlen, "cannot start the lease's thread");
		goto fail;
	}
	(void)pthread_setname_np(l->thread, "cnl-lease");
	l->running = true;
	cnl_log(CNL_LOG_INFO, "leading",
	        "epoch=%" PRId64 " holder=%s lease_ms=%" PRId64, l->epoch,
	        cnl_log_quote(q, sizeof(q), l->holder), ttl_ms);
	*ret = l;
	return 0;
fail:
	cnl_leader_free(l);
	return r;
}

int64_t cnl_leader_epoch(const struct cnl_leader *l)
{
	return l ? l->epoch : 0;
}

bool cnl_leader_valid(const struct cnl_leader *l)
{
	return l && mono_ms() < atomic_load(&l->valid_until);
}

int64_t cnl_leader_lag_ms(const struct cnl_leader *l)
{
	return l ? mono_ms() - (atomic_load(&l->valid_until) - l->ttl_ms) : 0;
}

void cnl_leader_free(struct cnl_leader *l)
{
	if (!l)
		return;
	if (l->running) {
		pthread_mutex_lock(&l->mu);
		l->stop = true;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->thread, NULL);
	}
	if (l->epoch > 0 && l->store &&
	    cnl_store_lease_release(l->store, l->holder, l->epoch) == 0)
		cnl_log(CNL_LOG_INFO, "leader's lease released",
		        "epoch=%" PRId64, l->epoch);
	cnl_store_close(l->store);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}
