/*
 * state.c - the workload state machine of state.h: one table, read by
 * every component that moves or shows a workload's state.
 *
 * The table is written per state as the events it takes; a cell holds the
 * next state for a job and for a server (most are the same).  NONE marks
 * an illegal transition.  Kept as data so that the header's drawing, the
 * test that walks every pair and the code cannot disagree quietly: the
 * test checks this table against an independent statement of the rules.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "wire/state.h"

#define NONE CNL_WL_NSTATES

struct cell {
	unsigned char job, server;
};

#define SAME(s)      \
	{            \
		s, s \
	}
#define END(j, v)    \
	{            \
		j, v \
	}
#define X_                 \
	{                  \
		NONE, NONE \
	}

/* The final state a stopped workload ends in, by kind. */
#define ENDED END(CNL_WL_CANCELLED, CNL_WL_STOPPED)

static const struct cell table[CNL_WL_NSTATES][CNL_WL_NEVENTS] = {
    /* PLACE, RUNNING, SUCCEEDED, FAILED, STOPPED, CANCEL, PREEMPT,
     * REQUEUE, NODE_LOST, WORK_LOST, START, INVALID */
    [CNL_WL_PENDING] = {SAME(CNL_WL_ASSIGNED), X_, X_, X_, X_, ENDED, X_, X_,
                        X_, X_, X_, SAME(CNL_WL_FAILED)},
    [CNL_WL_ASSIGNED] = {X_, SAME(CNL_WL_STARTED),
                         END(CNL_WL_SUCCEEDED, CNL_WL_STOPPED),
                         SAME(CNL_WL_FAILED),
                         END(CNL_WL_FAILED, CNL_WL_STOPPED),
                         SAME(CNL_WL_STOPPING), SAME(CNL_WL_REQUEUING),
                         SAME(CNL_WL_REQUEUING), SAME(CNL_WL_PENDING), X_, X_,
                         X_},
    [CNL_WL_STARTED] = {X_, SAME(CNL_WL_STARTED),
                        END(CNL_WL_SUCCEEDED, CNL_WL_STOPPED),
                        SAME(CNL_WL_FAILED), END(CNL_WL_FAILED, CNL_WL_STOPPED),
                        SAME(CNL_WL_STOPPING), SAME(CNL_WL_REQUEUING),
                        SAME(CNL_WL_REQUEUING), SAME(CNL_WL_PENDING),
                        SAME(CNL_WL_PENDING), X_, X_},
    [CNL_WL_STOPPING] = {X_, SAME(CNL_WL_STOPPING), ENDED, ENDED, ENDED,
                         SAME(CNL_WL_STOPPING), X_, X_, ENDED, ENDED, X_, X_},
    [CNL_WL_REQUEUING] = {X_, SAME(CNL_WL_REQUEUING), SAME(CNL_WL_PENDING),
                          SAME(CNL_WL_PENDING), SAME(CNL_WL_PENDING),
                          SAME(CNL_WL_STOPPING), SAME(CNL_WL_REQUEUING),
                          SAME(CNL_WL_REQUEUING), SAME(CNL_WL_PENDING),
                          SAME(CNL_WL_PENDING), X_, X_},
    [CNL_WL_SUCCEEDED] = {X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_},
    [CNL_WL_FAILED] = {X_, X_, X_, X_, X_, X_, X_, X_, X_, X_,
                       END(NONE, CNL_WL_PENDING), X_},
    [CNL_WL_CANCELLED] = {X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_, X_},
    [CNL_WL_STOPPED] = {X_, X_, X_, X_, X_, X_, X_, X_, X_, X_,
                        END(NONE, CNL_WL_PENDING), X_},
};

static const char *const state_names[] = {
#define CNL_WL_STATE_NAME(name, text) text,
    CNL_WL_STATE_LIST(CNL_WL_STATE_NAME)
#undef CNL_WL_STATE_NAME
};

static const char *const event_names[] = {
#define CNL_WL_EVENT_NAME(name, text, actor) text,
    CNL_WL_EVENT_LIST(CNL_WL_EVENT_NAME)
#undef CNL_WL_EVENT_NAME
};

static const enum cnl_wl_actor event_actors[] = {
#define CNL_WL_EVENT_ACTOR(name, text, actor) actor,
    CNL_WL_EVENT_LIST(CNL_WL_EVENT_ACTOR)
#undef CNL_WL_EVENT_ACTOR
};

static bool valid(enum cnl_wl_kind kind, enum cnl_wl_state s,
                  enum cnl_wl_event e)
{
	return (kind == CNL_WL_JOB || kind == CNL_WL_SERVER) &&
	       (unsigned)s < CNL_WL_NSTATES && (unsigned)e < CNL_WL_NEVENTS;
}

int cnl_wl_next(enum cnl_wl_kind kind, enum cnl_wl_state state,
                enum cnl_wl_event event, enum cnl_wl_state *ret_state)
{
	const struct cell *c;
	unsigned next;

	if (!valid(kind, state, event))
		return -EINVAL;
	c = &table[state][event];
	next = kind == CNL_WL_JOB ? c->job : c->server;
	if (next == NONE)
		return -CNL_ESTATE;
	*ret_state = (enum cnl_wl_state)next;
	return 0;
}

void cnl_wl_explain(enum cnl_wl_kind kind, enum cnl_wl_state state,
                    enum cnl_wl_event event, char *buf, size_t len)
{
	snprintf(buf, len, "a %s that is %s cannot take the event \"%s\"",
	         kind == CNL_WL_JOB ? "job" : "server",
	         cnl_wl_state_name(state), cnl_wl_event_name(event));
}

const char *cnl_wl_state_name(enum cnl_wl_state s)
{
	return (unsigned)s < CNL_WL_NSTATES ? state_names[s] : "?";
}

const char *cnl_wl_event_name(enum cnl_wl_event e)
{
	return (unsigned)e < CNL_WL_NEVENTS ? event_names[e] : "?";
}

enum cnl_wl_actor cnl_wl_event_actor(enum cnl_wl_event e)
{
	return (unsigned)e < CNL_WL_NEVENTS ? event_actors[e]
	                                    : CNL_WL_BY_CONTROLLER;
}

int cnl_wl_state_parse(const char *name, enum cnl_wl_state *ret)
{
	for (unsigned i = 0; name && i < CNL_WL_NSTATES; i++)
		if (strcmp(name, state_names[i]) == 0) {
			*ret = (enum cnl_wl_state)i;
			return 0;
		}
	return -CNL_EPARSE;
}

const char *cnl_wl_store_state(enum cnl_wl_kind kind, enum cnl_wl_state s)
{
	switch (s) {
	case CNL_WL_STARTED:
		return "running";
	case CNL_WL_ASSIGNED:
		return kind == CNL_WL_JOB ? "running" : "starting";
	case CNL_WL_STOPPING:
	case CNL_WL_REQUEUING:
		return kind == CNL_WL_JOB ? "running" : "stopping";
	default:
		return cnl_wl_state_name(s);
	}
}

bool cnl_wl_store_state_valid(enum cnl_wl_kind kind, const char *name)
{
	for (unsigned i = 0; name && i < CNL_WL_NSTATES; i++) {
		enum cnl_wl_state s = (enum cnl_wl_state)i;

		/* Only states a workload of this kind can be in. */
		if ((kind == CNL_WL_JOB && s == CNL_WL_STOPPED) ||
		    (kind == CNL_WL_SERVER &&
		     (s == CNL_WL_SUCCEEDED || s == CNL_WL_CANCELLED)))
			continue;
		if (strcmp(name, cnl_wl_store_state(kind, s)) == 0)
			return true;
	}
	return false;
}

bool cnl_wl_placed(enum cnl_wl_state s)
{
	return s == CNL_WL_ASSIGNED || s == CNL_WL_STARTED ||
	       s == CNL_WL_STOPPING || s == CNL_WL_REQUEUING;
}

bool cnl_wl_ended(enum cnl_wl_state s)
{
	return s == CNL_WL_SUCCEEDED || s == CNL_WL_FAILED ||
	       s == CNL_WL_CANCELLED || s == CNL_WL_STOPPED;
}
