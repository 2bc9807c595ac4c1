/*
 * test_state.c - the workload state machine (wire/state.h) over every
 * (kind, state, event) triple, against the rules written out here as
 * code of their own (not the module's table): so a change to the table
 * that the rules do not allow fails, and so does a rule the table lost.
 * Also: illegal transitions name both the state and the event; every
 * state of a kind is reachable from PENDING and every one can still end;
 * the store's names.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "wire/state.h"

#define NONE CNL_WL_NSTATES

/* The rules, as the README and the issue state them. */
static int rule(enum cnl_wl_kind k, enum cnl_wl_state s, enum cnl_wl_event e)
{
	bool job = k == CNL_WL_JOB;
	bool placed = s == CNL_WL_ASSIGNED || s == CNL_WL_STARTED;
	int ended_by_user = job ? CNL_WL_CANCELLED : CNL_WL_STOPPED;

	/* States a kind never has take no events at all. */
	if ((job && s == CNL_WL_STOPPED) ||
	    (!job && (s == CNL_WL_SUCCEEDED || s == CNL_WL_CANCELLED)))
		return NONE;
	switch (e) {
	case CNL_WL_EV_PLACE: /* only the scheduler places, only the queued */
		return s == CNL_WL_PENDING ? CNL_WL_ASSIGNED : NONE;
	case CNL_WL_EV_REPORT_RUNNING:
		if (placed)
			return CNL_WL_STARTED;
		/* Still running while told to stop: the order stands. */
		if (s == CNL_WL_STOPPING || s == CNL_WL_REQUEUING)
			return s;
		return NONE;
	case CNL_WL_EV_REPORT_SUCCEEDED:
	case CNL_WL_EV_REPORT_FAILED:
	case CNL_WL_EV_REPORT_STOPPED:
		if (s == CNL_WL_STOPPING)
			return ended_by_user;
		if (s == CNL_WL_REQUEUING)
			return CNL_WL_PENDING; /* requeued */
		if (!placed)
			return NONE;
		if (e == CNL_WL_EV_REPORT_FAILED)
			return CNL_WL_FAILED;
		/* A server that ends is stopped; a job killed under it
		 * (lease, OOM) failed. */
		if (!job)
			return CNL_WL_STOPPED;
		return e == CNL_WL_EV_REPORT_SUCCEEDED ? CNL_WL_SUCCEEDED
		                                       : CNL_WL_FAILED;
	case CNL_WL_EV_CANCEL:
		if (s == CNL_WL_PENDING)
			return ended_by_user;
		if (placed || s == CNL_WL_STOPPING || s == CNL_WL_REQUEUING)
			return CNL_WL_STOPPING; /* cancel wins over requeue */
		return NONE;
	case CNL_WL_EV_PREEMPT:
	case CNL_WL_EV_REQUEUE:
		return placed || s == CNL_WL_REQUEUING ? CNL_WL_REQUEUING
		                                       : NONE;
	case CNL_WL_EV_NODE_LOST:
	case CNL_WL_EV_WORK_LOST:
		/* Work not yet reported running cannot be "lost" by its
		 * agent; a lost node takes it all. */
		if (s == CNL_WL_ASSIGNED)
			return e == CNL_WL_EV_NODE_LOST ? CNL_WL_PENDING : NONE;
		if (s == CNL_WL_STARTED || s == CNL_WL_REQUEUING)
			return CNL_WL_PENDING;
		if (s == CNL_WL_STOPPING)
			return ended_by_user;
		return NONE;
	case CNL_WL_EV_START:
		return !job && (s == CNL_WL_STOPPED || s == CNL_WL_FAILED)
		           ? CNL_WL_PENDING
		           : NONE;
	case CNL_WL_EV_INVALID:
		return s == CNL_WL_PENDING ? CNL_WL_FAILED : NONE;
	default:
		return NONE;
	}
}

static void test_every_pair(void **state)
{
	int legal = 0, illegal = 0;

	(void)state;
	for (int k = CNL_WL_JOB; k <= CNL_WL_SERVER; k++)
		for (int s = 0; s < CNL_WL_NSTATES; s++)
			for (int e = 0; e < CNL_WL_NEVENTS; e++) {
				enum cnl_wl_state got = CNL_WL_NSTATES;
				int want = rule(k, s, e);
				int r = cnl_wl_next(k, s, e, &got);

				if (want == NONE) {
					if (r != -CNL_ESTATE)
						fail_msg(
						    "%s %s + %s: want illegal, "
						    "got %s (%d)",
						    k ? "server" : "job",
						    cnl_wl_state_name(s),
						    cnl_wl_event_name(e),
						    cnl_wl_state_name(got), r);
					/* Untouched on failure. */
					assert_int_equal(got, CNL_WL_NSTATES);
					illegal++;
				} else {
					if (r != 0 || (int)got != want)
						fail_msg(
						    "%s %s + %s: want %s, got "
						    "%s "
						    "(%d)",
						    k ? "server" : "job",
						    cnl_wl_state_name(s),
						    cnl_wl_event_name(e),
						    cnl_wl_state_name(want),
						    cnl_wl_state_name(got), r);
					legal++;
				}
			}
	assert_int_equal(legal + illegal, 2 * CNL_WL_NSTATES * CNL_WL_NEVENTS);
	assert_true(legal > 40);
}

static void test_illegal_names_both(void **state)
{
	enum cnl_wl_state got;
	char msg[160];

	(void)state;
	assert_int_equal(
	    cnl_wl_next(CNL_WL_JOB, CNL_WL_SUCCEEDED, CNL_WL_EV_CANCEL, &got),
	    -CNL_ESTATE);
	cnl_wl_explain(CNL_WL_JOB, CNL_WL_SUCCEEDED, CNL_WL_EV_CANCEL, msg,
	               sizeof(msg));
	assert_non_null(strstr(msg, "job"));
	assert_non_null(strstr(msg, "succeeded"));
	assert_non_null(strstr(msg, "cancel"));
	assert_non_null(strstr(cnl_strerror(-CNL_ESTATE), "state"));
	/* Outside the enums. */
	assert_int_equal(
	    cnl_wl_next(CNL_WL_JOB, CNL_WL_NSTATES, CNL_WL_EV_PLACE, &got),
	    -EINVAL);
	assert_int_equal(
	    cnl_wl_next(CNL_WL_JOB, CNL_WL_PENDING, CNL_WL_NEVENTS, &got),
	    -EINVAL);
	assert_int_equal(cnl_wl_next((enum cnl_wl_kind)7, CNL_WL_PENDING,
	                             CNL_WL_EV_PLACE, &got),
	                 -EINVAL);
	assert_string_equal(cnl_wl_state_name(CNL_WL_NSTATES), "?");
}

/* From PENDING, every state of a kind is reachable; from every state of
 * it, an ended state (or, for servers, PENDING again) is reachable. */
static void test_reachable_and_endable(void **state)
{
	(void)state;
	for (int k = CNL_WL_JOB; k <= CNL_WL_SERVER; k++) {
		bool seen[CNL_WL_NSTATES] = {false}, grew = true;

		seen[CNL_WL_PENDING] = true;
		while (grew) {
			grew = false;
			for (int s = 0; s < CNL_WL_NSTATES; s++)
				for (int e = 0; seen[s] && e < CNL_WL_NEVENTS;
				     e++) {
					enum cnl_wl_state n;

					if (cnl_wl_next(k, s, e, &n) == 0 &&
					    !seen[n])
						seen[n] = grew = true;
				}
		}
		for (int s = 0; s < CNL_WL_NSTATES; s++) {
			bool want = rule(k, s, CNL_WL_EV_CANCEL) != NONE ||
			            s == CNL_WL_PENDING ||
			            rule(k, s, CNL_WL_EV_START) != NONE ||
			            cnl_wl_ended(s);
			if (k == CNL_WL_JOB && s == CNL_WL_STOPPED)
				want = false;
			if (k == CNL_WL_SERVER &&
			    (s == CNL_WL_SUCCEEDED || s == CNL_WL_CANCELLED))
				want = false;
			if (seen[s] != want)
				fail_msg("%s: %s reachable %d, want %d",
				         k ? "server" : "job",
				         cnl_wl_state_name(s), seen[s], want);
		}
		/* Every non-ended state can end (no trap states). */
		for (int s = 0; s < CNL_WL_NSTATES; s++) {
			bool can_end[CNL_WL_NSTATES] = {false};

			if (!seen[s] || cnl_wl_ended(s))
				continue;
			can_end[s] = true;
			for (int round = 0; round < CNL_WL_NSTATES; round++)
				for (int a = 0; a < CNL_WL_NSTATES; a++)
					for (int e = 0;
					     can_end[a] && e < CNL_WL_NEVENTS;
					     e++) {
						enum cnl_wl_state n;

						if (cnl_wl_next(k, a, e, &n) ==
						    0)
							can_end[n] = true;
					}
			bool ends = false;
			for (int a = 0; a < CNL_WL_NSTATES; a++)
				ends |= can_end[a] && cnl_wl_ended(a);
			if (!ends)
				fail_msg("%s: %s can never end",
				         k ? "server" : "job",
				         cnl_wl_state_name(s));
		}
	}
}

static void test_names_and_store_states(void **state)
{
	static const char *const job_states[] = {
	    "pending", "running", "succeeded", "failed", "cancelled"};
	static const char *const server_states[] = {
	    "pending", "starting", "running", "stopping", "stopped", "failed"};
	enum cnl_wl_state s;

	(void)state;
	for (int i = 0; i < CNL_WL_NSTATES; i++) {
		assert_int_equal(cnl_wl_state_parse(cnl_wl_state_name(i), &s),
		                 0);
		assert_int_equal(s, i);
	}
	assert_int_equal(cnl_wl_state_parse("preempted", &s), -CNL_EPARSE);
	assert_int_equal(cnl_wl_state_parse(NULL, &s), -CNL_EPARSE);
	for (size_t i = 0; i < 5; i++)
		assert_true(
		    cnl_wl_store_state_valid(CNL_WL_JOB, job_states[i]));
	for (size_t i = 0; i < 6; i++)
		assert_true(
		    cnl_wl_store_state_valid(CNL_WL_SERVER, server_states[i]));
	assert_false(cnl_wl_store_state_valid(CNL_WL_JOB, "stopped"));
	assert_false(cnl_wl_store_state_valid(CNL_WL_JOB, "starting"));
	assert_false(cnl_wl_store_state_valid(CNL_WL_SERVER, "cancelled"));
	assert_false(cnl_wl_store_state_valid(CNL_WL_SERVER, "assigned"));
	assert_string_equal(cnl_wl_store_state(CNL_WL_JOB, CNL_WL_REQUEUING),
	                    "running");
	assert_string_equal(cnl_wl_store_state(CNL_WL_SERVER, CNL_WL_REQUEUING),
	                    "stopping");
	assert_string_equal(cnl_wl_store_state(CNL_WL_SERVER, CNL_WL_ASSIGNED),
	                    "starting");
	assert_int_equal(cnl_wl_event_actor(CNL_WL_EV_PLACE),
	                 CNL_WL_BY_SCHEDULER);
	assert_int_equal(cnl_wl_event_actor(CNL_WL_EV_REPORT_FAILED),
	                 CNL_WL_BY_AGENT);
	assert_int_equal(cnl_wl_event_actor(CNL_WL_EV_CANCEL), CNL_WL_BY_USER);
	assert_int_equal(cnl_wl_event_actor(CNL_WL_EV_NODE_LOST),
	                 CNL_WL_BY_CONTROLLER);
	assert_true(cnl_wl_placed(CNL_WL_STOPPING));
	assert_true(cnl_wl_placed(CNL_WL_REQUEUING));
	assert_false(cnl_wl_placed(CNL_WL_PENDING));
	assert_false(cnl_wl_placed(CNL_WL_STOPPED));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_pair),
	    cmocka_unit_test(test_illegal_names_both),
	    cmocka_unit_test(test_reachable_and_endable),
	    cmocka_unit_test(test_names_and_store_states),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
