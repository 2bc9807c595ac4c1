/*
 * test_hammer.c - cnlabd under concurrent load: submitters, cancellers, a
 * node agent that runs and completes what it is given, and readers, all
 * at once over real HTTP on loopback against one cnlabd with its
 * scheduling loop thread running and a real SQLite file.
 *
 * What it promises: no request answers 5xx; every acknowledged submission
 * is there, exactly once, and ends (succeeded or cancelled; a job nobody
 * cancelled succeeds); nothing runs twice (the agent never sees the same
 * job started at two epochs); the audit chain verifies afterwards.  Its
 * main use is under ThreadSanitizer (the tsan preset runs it): any data
 * race between the request threads, the loop and the long polls fails the
 * run.  Threads record what they see; only the main thread asserts.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>

#include "client.h"
#include "cnlab/errors.h"
#include "common/time.h"
#include "net/http_server.h"
#include "server/api.h"
#include "server/auth.h"
#include "store/store.h"

#define SECRET        "test secret for cnlabd, 32+ bytes long"

#define SUBMITTERS    6
#define PER_SUBMITTER 40
#define N_JOBS        (SUBMITTERS * PER_SUBMITTER)

static struct {
	struct tc_server s;
	char admin[CNL_AUTH_JWT_MAX];
	char project[CNL_ID_MAX];
	char node[CNL_ID_MAX];
	char cred[CNL_API_NODE_SECRET_MAX];
	pthread_mutex_t mu; /* guards ids, n_ids, cancelled */
	char ids[N_JOBS][CNL_ID_MAX];
	bool cancelled[N_JOBS];
	int n_ids;
	atomic_int submitters_left;
	atomic_bool stop;
	/* What the threads saw that they should not have. */
	atomic_int server_errors, bad_replies, twice;
	char first_error[256];
} F;

static void note_error(const char *what, const char *path, long status)
{
	pthread_mutex_lock(&F.mu);
	if (!F.first_error[0])
		snprintf(F.first_error, sizeof(F.first_error), "%s %s: %ld",
		         what, path, status);
	pthread_mutex_unlock(&F.mu);
}

/* One request from a worker thread: no cmocka asserts here. */
static long call(const char *method, const char *path, const char *token,
                 const char *body, json_t **ret)
{
	struct reply r;
	long st;

	/* A generous bound for a hung server, not a time limit. */
	st = http_try(method, path, token, body, 300, &r) == 0 ? r.status : 0;
	if (st >= 500 || st == 0) {
		atomic_fetch_add(&F.server_errors, 1);
		note_error(method, path, st);
	}
	if (ret)
		*ret = json_incref(r.body);
	reply_done(&r);
	return st;
}

static void *submitter(void *arg)
{
	char path[128];

	snprintf(path, sizeof(path), "/v1/projects/%s/jobs", F.project);
	for (int i = 0; i < PER_SUBMITTER; i++) {
		json_t *o = NULL;
		long st =
		    call("POST", path, F.admin,
		         "{\"command\":\"true\",\"gpu\":\"h100-10\"}", &o);

		if (st == 201 && json_is_string(json_object_get(o, "id"))) {
			pthread_mutex_lock(&F.mu);
			snprintf(F.ids[F.n_ids++], CNL_ID_MAX, "%s",
			         json_string_value(json_object_get(o, "id")));
			pthread_mutex_unlock(&F.mu);
		} else if (st != 201) {
			atomic_fetch_add(&F.bad_replies, 1);
			note_error("submit", path, st);
		}
		json_decref(o);
	}
	atomic_fetch_sub(&F.submitters_left, 1);
	return NULL;
}

/* Cancels every fifth job it finds, while the others are submitted. */
static void *canceller(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	while (!atomic_load(&F.stop)) {
		char path[160];
		int n, k;

		pthread_mutex_lock(&F.mu);
		n = F.n_ids;
		k = n ? (int)(rand_r(&seed) % (unsigned)n) : -1;
		if (k >= 0 && (k % 5 != 0 || F.cancelled[k]))
			k = -1;
		if (k >= 0) {
			F.cancelled[k] = true;
			snprintf(path, sizeof(path), "/v1/jobs/%s/cancel",
			         F.ids[k]);
		}
		pthread_mutex_unlock(&F.mu);
		if (k < 0) {
			if (!atomic_load(&F.submitters_left))
				break;
			usleep(1000);
			continue;
		}
		/* 200, or 409 once it has ended. */
		long st = call("POST", path, F.admin, NULL, NULL);
		if (st != 200 && st != 409) {
			atomic_fetch_add(&F.bad_replies, 1);
			note_error("cancel", path, st);
		}
	}
	return NULL;
}

/* Runs what it is assigned: reports running, then succeeded; reports
 * stopped for what it is told to stop. */
static void *agent(void *arg)
{
	struct {
		char id[CNL_ID_MAX];
		int64_t epoch;
	} *seen = calloc(N_JOBS * 4, sizeof(*seen));
	int n_seen = 0;
	unsigned long long since = 0;
	char path[200], rpath[160];

	snprintf(rpath, sizeof(rpath), "/v1/nodes/%s/reports", F.node);
	while (!atomic_load(&F.stop)) {
		json_t *o = NULL, *as;
		size_t i;

		snprintf(path, sizeof(path),
		         "/v1/nodes/%s/assignments?since=%llu&wait=1", F.node,
		         since);
		if (call("GET", path, F.cred, NULL, &o) != 200) {
			json_decref(o);
			continue;
		}
		since = (unsigned long long)json_integer_value(
		    json_object_get(o, "version"));
		as = json_object_get(o, "assignments");
		for (i = 0; i < json_array_size(as); i++) {
			json_t *a = json_array_get(as, i);
			const char *id =
			    json_string_value(json_object_get(a, "id"));
			const char *act =
			    json_string_value(json_object_get(a, "action"));
			int64_t ep =
			    json_integer_value(json_object_get(a, "epoch"));
			char body[256];
			bool known = false, other = false;

			if (!id || !act)
				continue;
			for (int k = 0; k < n_seen; k++)
				if (strcmp(seen[k].id, id) == 0) {
					known |= seen[k].epoch == ep;
					other |= seen[k].epoch != ep;
				}
			if (strcmp(act, "run") == 0 && !known) {
				if (other)
					atomic_fetch_add(&F.twice, 1);
				if (n_seen < N_JOBS * 4) {
					snprintf(seen[n_seen].id, CNL_ID_MAX,
					         "%s", id);
					seen[n_seen++].epoch = ep;
				}
				snprintf(body, sizeof(body),
				         "{\"id\":\"%s\",\"epoch\":%lld,"
				         "\"state\":\"running\"}",
				         id, (long long)ep);
				call("POST", rpath, F.cred, body, NULL);
				snprintf(body, sizeof(body),
				         "{\"id\":\"%s\",\"epoch\":%lld,"
				         "\"state\":\"succeeded\","
				         "\"exit_code\":0}",
				         id, (long long)ep);
				call("POST", rpath, F.cred, body, NULL);
			} else if (strcmp(act, "stop") == 0) {
				snprintf(body, sizeof(body),
				         "{\"id\":\"%s\",\"epoch\":%lld,"
				         "\"state\":\"stopped\"}",
				         id, (long long)ep);
				call("POST", rpath, F.cred, body, NULL);
			}
		}
		json_decref(o);
	}
	free(seen);
	return NULL;
}

/* Reads while the rest writes: one job, the list, health, metrics. */
static void *reader(void *arg)
{
	char path[160];

	while (!atomic_load(&F.stop)) {
		char id[CNL_ID_MAX] = "";

		pthread_mutex_lock(&F.mu);
		if (F.n_ids)
			snprintf(id, sizeof(id), "%s", F.ids[F.n_ids - 1]);
		pthread_mutex_unlock(&F.mu);
		if (id[0]) {
			snprintf(path, sizeof(path), "/v1/jobs/%s", id);
			if (call("GET", path, F.admin, NULL, NULL) != 200)
				atomic_fetch_add(&F.bad_replies, 1);
		}
		snprintf(path, sizeof(path), "/v1/projects/%s/jobs?limit=50",
		         F.project);
		call("GET", path, F.admin, NULL, NULL);
		call("GET", "/healthz", NULL, NULL, NULL);
		call("GET", "/metrics", F.admin, NULL, NULL);
	}
	return NULL;
}

static json_t *ok(const char *method, const char *path, const char *token,
                  const char *body, long status)
{
	struct reply r;
	json_t *o;

	http(method, path, token, body, &r);
	expect(&r, status, path);
	o = json_incref(r.body);
	reply_done(&r);
	return o;
}

static int setup(void **state)
{
	json_t *o;

	pthread_mutex_init(&F.mu, NULL);
	tc_server_open(&F.s, "cnl-hammer");
	tc_server_start(&F.s,
	                &(struct cnl_api_config){
	                    .jwt_key = (const uint8_t *)SECRET,
	                    .jwt_key_len = strlen(SECRET),
	                    .node_lost_ms = 3600 * 1000,
	                    .cycle_interval_ms = 20,
	                },
	                true);

	o = ok("POST", "/v1/auth/login", NULL,
	       "{\"user\":\"root\",\"password\":\"pw-root\"}", 200);
	snprintf(F.admin, sizeof(F.admin), "%s", str(o, "token"));
	json_decref(o);
	o = ok("POST", "/v1/projects", F.admin, "{\"name\":\"hammer\"}", 201);
	snprintf(F.project, sizeof(F.project), "%s", str(o, "id"));
	json_decref(o);
	o = ok("POST", "/v1/nodes/join-tokens", F.admin, "{\"node\":\"h1\"}",
	       201);
	snprintf(F.cred, sizeof(F.cred), "%s", str(o, "token"));
	json_decref(o);
	o = ok("POST", "/v1/nodes", F.cred,
	       "{\"protocol\":5,\"name\":\"h1\",\"gpu_type\":\"H100-80GB-SXM\","
	       "\"gpus\":8,\"cpu_milli\":256000,\"mem_mib\":2048000,"
	       "\"address\":\"127.0.0.1\"}",
	       201);
	snprintf(F.node, sizeof(F.node), "%s", str(o, "id"));
	if (json_is_string(json_object_get(o, "credential")))
		snprintf(F.cred, sizeof(F.cred), "%s", str(o, "credential"));
	json_decref(o);
	return 0;
}

static int teardown(void **state)
{
	tc_server_close(&F.s);
	return 0;
}

/* The state of every job, from the API; how many are not yet ended. */
static int count_active(json_t **states)
{
	int active = 0;

	*states = json_object();
	for (int i = 0; i < F.n_ids; i++) {
		char path[160];
		json_t *o;
		const char *s;

		snprintf(path, sizeof(path), "/v1/jobs/%s", F.ids[i]);
		o = ok("GET", path, F.admin, NULL, 200);
		s = str(o, "state");
		json_object_set_new(*states, F.ids[i], json_string(s));
		active += strcmp(s, "succeeded") != 0 &&
		          strcmp(s, "cancelled") != 0 &&
		          strcmp(s, "failed") != 0;
		json_decref(o);
	}
	return active;
}

static void test_hammer(void **state)
{
	pthread_t sub[SUBMITTERS], can[2], ag, rd;
	json_t *states = NULL, *list;
	int active = -1, rounds;
	int64_t bad_seq = 0;
	char path[160];

	atomic_store(&F.submitters_left, SUBMITTERS);
	assert_int_equal(pthread_create(&ag, NULL, agent, NULL), 0);
	assert_int_equal(pthread_create(&rd, NULL, reader, NULL), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&can[i], NULL, canceller,
		                                (void *)(uintptr_t)(i + 7)),
		                 0);
	for (int i = 0; i < SUBMITTERS; i++)
		assert_int_equal(pthread_create(&sub[i], NULL, submitter, NULL),
		                 0);
	for (int i = 0; i < SUBMITTERS; i++)
		pthread_join(sub[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(can[i], NULL);
	/* Everything ends: the agent completes what runs (a bound on the
	 * rounds for a hung server, not a time limit). */
	for (rounds = 0; rounds < 600 && active != 0; rounds++) {
		json_decref(states);
		active = count_active(&states);
		if (active)
			usleep(100 * 1000);
	}
	atomic_store(&F.stop, true);
	pthread_join(ag, NULL);
	pthread_join(rd, NULL);

	if (F.first_error[0])
		print_message("first unexpected reply: %s\n", F.first_error);
	assert_int_equal(atomic_load(&F.server_errors), 0);
	assert_int_equal(atomic_load(&F.bad_replies), 0);
	assert_int_equal(atomic_load(&F.twice), 0);
	assert_int_equal(F.n_ids, N_JOBS);
	assert_int_equal(active, 0);
	/* A job nobody cancelled succeeded. */
	for (int i = 0; i < F.n_ids; i++) {
		const char *s =
		    json_string_value(json_object_get(states, F.ids[i]));

		if (!F.cancelled[i] && strcmp(s, "succeeded") != 0)
			fail_msg("%s: %s, never cancelled", F.ids[i], s);
	}
	json_decref(states);
	/* Each acknowledged id is listed exactly once. */
	snprintf(path, sizeof(path), "/v1/projects/%s/jobs?limit=1000",
	         F.project);
	list = ok("GET", path, F.admin, NULL, 200);
	assert_int_equal(json_array_size(json_object_get(list, "items")),
	                 N_JOBS);
	json_decref(list);
	cnl_api_stop(F.s.api);
	assert_int_equal(cnl_store_audit_verify(F.s.store, &bad_seq), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hammer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
