/*
 * state.h - the one state machine of a workload (a batch job or a notebook
 * server): its states, the events that move it, who may cause each, and
 * the names the store, the run record and the API show.
 *
 * One owner.  The controller (server/ctl) holds each active workload's
 * state and changes it only through cnl_wl_next(); the store persists the
 * state's name in the run record ("phase") and a coarser, user-facing name
 * in its state column (cnl_wl_store_state()); the scheduler reads a
 * snapshot (pending, or placed with the allocation it holds); the agent
 * only reports events.  An illegal transition is an error that names the
 * state and the event.
 *
 *                   CANCEL: job -> CANCELLED, server -> STOPPED
 *           +----------------------------------------------------------+
 *           |                                                          v
 *  START  +---------+  PLACE    +----------+  REPORT_RUNNING  +---------+
 * ------->| PENDING |---------->| ASSIGNED |----------------->| STARTED |
 * (user)  +---------+ (sched)   +----------+     (agent)      +---------+
 *           ^  ^  |                 |    \                     |  |  |
 *           |  |  | INVALID (ctl)   |     \ REPORT_SUCCEEDED, |  |  |
 *           |  |  v                 |      \ _FAILED, _STOPPED |  |  |
 *           |  | FAILED             |       '----------+-------'  |  |
 *           |  |                    |                  v          |  |
 *           |  | NODE_LOST,         |     SUCCEEDED / FAILED /    |  |
 *           |  | WORK_LOST (ctl)    |     STOPPED (servers)       |  |
 *           |  +--------------------+-----------------------------+  |
 *           |                       | CANCEL (user)   PREEMPT (sched),|
 *           |                       v                 REQUEUE (ctl)   |
 *           |                  +----------+                          v
 *           |                  | STOPPING |<------ CANCEL ----+-----------+
 *           |                  +----------+                   | REQUEUING |
 *           |                       | any end report,         +-----------+
 *           |                       | NODE_LOST, WORK_LOST          |
 *           |                       v                               |
 *           |          CANCELLED (jobs) / STOPPED (servers)         |
 *           +-------------------------------------------------------+
 *               any end report, NODE_LOST, WORK_LOST: back in the queue
 *
 * Transition table (job / server where they differ; "-" is illegal; the
 * REPORT_* events are written RUNNING, SUCCEEDED, FAILED, STOPPED):
 *
 *  state \ event PLACE    RUNNING   SUCCEEDED FAILED STOPPED   CANCEL PREEMPT,
 * NODE_LOST WORK_LOST START    INVALID REQUEUE PENDING       ASSIGNED - - - -
 * CANC/STOP -         -         -         -        FAILED ASSIGNED      -
 * STARTED   SUCC/STOP FAILED FAIL/STOP STOPPING  REQUEUING PENDING   - - -
 *  STARTED       -        STARTED   SUCC/STOP FAILED FAIL/STOP STOPPING
 * REQUEUING PENDING   PENDING   -        - STOPPING      -        STOPPING
 * CANC/STOP same   same      STOPPING  -         CANC/STOP CANC/STOP -        -
 *  REQUEUING     -        REQUEUING PENDING   PENDING PENDING  STOPPING
 * REQUEUING PENDING   PENDING   -        - SUCCEEDED     -        -         -
 * -      -         -         -         -         -         -        - FAILED -
 * -         -         -      -         -         -         -         -
 * -/PENDING - CANCELLED     -        -         -         -      -         - -
 * -         -         -        - STOPPED       -        -         -         -
 * -         -         -         -         -         PENDING  -
 *
 * Who causes what: PLACE and PREEMPT the scheduler; REPORT_* the node's
 * agent; CANCEL and START a user (cancel a job, stop or start a server);
 * NODE_LOST, WORK_LOST, REQUEUE and INVALID the controller (a node silent
 * past its timeout, work its agent stopped listing, a gang restarting
 * because a member lost its place, a shape that no longer parses).  A
 * workload told to stop keeps or gives back its allocation as the
 * controller decides (a pre-empted one gives it to the work that
 * pre-empted it; a gang member keeps it until it has left); the state
 * says only where it goes next.  A cancel during a requeue wins: the job
 * ends cancelled instead of going back to the queue.
 */
#ifndef CNL_WIRE_STATE_H
#define CNL_WIRE_STATE_H

#include <stdbool.h>
#include <stddef.h>

enum cnl_wl_kind { CNL_WL_JOB, CNL_WL_SERVER };

/* X(NAME, "name"): the state and the name the run record keeps. */
#define CNL_WL_STATE_LIST(X)             \
	X(CNL_WL_PENDING, "pending")     \
	X(CNL_WL_ASSIGNED, "assigned")   \
	X(CNL_WL_STARTED, "started")     \
	X(CNL_WL_STOPPING, "stopping")   \
	X(CNL_WL_REQUEUING, "requeuing") \
	X(CNL_WL_SUCCEEDED, "succeeded") \
	X(CNL_WL_FAILED, "failed")       \
	X(CNL_WL_CANCELLED, "cancelled") \
	X(CNL_WL_STOPPED, "stopped")

enum cnl_wl_state {
#define CNL_WL_STATE_ENUM(name, text) name,
	CNL_WL_STATE_LIST(CNL_WL_STATE_ENUM)
#undef CNL_WL_STATE_ENUM
	    CNL_WL_NSTATES
};

/* Who may cause an event. */
enum cnl_wl_actor {
	CNL_WL_BY_USER,
	CNL_WL_BY_SCHEDULER,
	CNL_WL_BY_AGENT,
	CNL_WL_BY_CONTROLLER,
};

/* X(NAME, "name", actor) */
#define CNL_WL_EVENT_LIST(X)                                               \
	X(CNL_WL_EV_PLACE, "place", CNL_WL_BY_SCHEDULER)                   \
	X(CNL_WL_EV_REPORT_RUNNING, "report running", CNL_WL_BY_AGENT)     \
	X(CNL_WL_EV_REPORT_SUCCEEDED, "report succeeded", CNL_WL_BY_AGENT) \
	X(CNL_WL_EV_REPORT_FAILED, "report failed", CNL_WL_BY_AGENT)       \
	X(CNL_WL_EV_REPORT_STOPPED, "report stopped", CNL_WL_BY_AGENT)     \
	X(CNL_WL_EV_CANCEL, "cancel", CNL_WL_BY_USER)                      \
	X(CNL_WL_EV_PREEMPT, "preempt", CNL_WL_BY_SCHEDULER)               \
	X(CNL_WL_EV_REQUEUE, "requeue", CNL_WL_BY_CONTROLLER)              \
	X(CNL_WL_EV_NODE_LOST, "node lost", CNL_WL_BY_CONTROLLER)          \
	X(CNL_WL_EV_WORK_LOST, "work lost", CNL_WL_BY_CONTROLLER)          \
	X(CNL_WL_EV_START, "start", CNL_WL_BY_USER)                        \
	X(CNL_WL_EV_INVALID, "invalid", CNL_WL_BY_CONTROLLER)

enum cnl_wl_event {
#define CNL_WL_EVENT_ENUM(name, text, actor) name,
	CNL_WL_EVENT_LIST(CNL_WL_EVENT_ENUM)
#undef CNL_WL_EVENT_ENUM
	    CNL_WL_NEVENTS
};

/*
 * cnl_wl_next - the state @event moves a workload of @kind in @state to,
 * into *@ret_state.  Returns 0, or -CNL_ESTATE when the table above has
 * no such transition (*@ret_state untouched; cnl_wl_explain() says why),
 * or -EINVAL for values outside the enums.
 */
int cnl_wl_next(enum cnl_wl_kind kind, enum cnl_wl_state state,
                enum cnl_wl_event event, enum cnl_wl_state *ret_state);

/*
 * cnl_wl_explain - "a job that is succeeded cannot cancel" style message
 * for the transition of @event from @state, naming both, into @buf.
 */
void cnl_wl_explain(enum cnl_wl_kind kind, enum cnl_wl_state state,
                    enum cnl_wl_event event, char *buf, size_t len);

/* The names: "pending", "place"; "?" outside the enums. */
const char *cnl_wl_state_name(enum cnl_wl_state s);
const char *cnl_wl_event_name(enum cnl_wl_event e);
enum cnl_wl_actor cnl_wl_event_actor(enum cnl_wl_event e);

/* cnl_wl_state_parse - a state by its name: 0 or -CNL_EPARSE. */
int cnl_wl_state_parse(const char *name, enum cnl_wl_state *ret);

/*
 * cnl_wl_store_state - the user-facing state the store keeps for @kind in
 * @state: a job is "pending", "running" (assigned, running, stopping or
 * being pre-empted), "succeeded", "failed" or "cancelled"; a server is
 * "pending", "starting" (assigned), "running", "stopping" (stopping or
 * being pre-empted), "stopped" or "failed".
 */
const char *cnl_wl_store_state(enum cnl_wl_kind kind, enum cnl_wl_state s);

/* cnl_wl_store_state_valid - whether @name is such a store state of
 * @kind (the store refuses any other). */
bool cnl_wl_store_state_valid(enum cnl_wl_kind kind, const char *name);

/* cnl_wl_placed - whether the workload was placed and has not yet left
 * its node (assigned, started, stopping, requeuing). */
bool cnl_wl_placed(enum cnl_wl_state s);

/* cnl_wl_ended - whether no event but START (servers) moves it again. */
bool cnl_wl_ended(enum cnl_wl_state s);

#endif /* CNL_WIRE_STATE_H */
