/*
 * job.h - the documents the CLI reads about its work, typed: a job, a
 * notebook server, the live status both carry while active, and the
 * pages that list them.  One struct per document, one encoder (to a JSON
 * object) and one strict decoder (from one) each, as in node.h.
 *
 *   cnlabd -> CLI   job       GET /v1/jobs/{id}, POST /v1/jobs/{id}/cancel,
 *                             the reply to POST /v1/projects/{p}/jobs
 *                   jobs      GET /v1/projects/{p}/jobs
 *                   server    GET /v1/servers/{id}, .../stop, .../start,
 *                             the reply to POST /v1/projects/{p}/servers
 *                   servers   GET /v1/projects/{p}/servers
 *
 * cnlabd fills these structs and sends what the encoders make; the CLI
 * reads replies only through the decoders.  The encoders write exactly
 * what cnlabd has always written, in the same order: optional fields are
 * absent when unset, and the few that are "null" when empty (a job's
 * deadline, a server's url, times not yet known) stay null.
 *
 * Strict.  A decoder refuses a body that is not an object, a field it
 * does not know (at any depth), a field of the wrong type, a number out
 * of its range, a string too long for its field or not one of its
 * names, or a required field that is missing; it returns -CNL_EFIELD
 * with @err naming the field by its path ("field \"status.reservation.
 * node\": required", "field \"items[2].gang.rank\": ...") and leaves
 * *@ret in a state that its _done() frees safely.  Every encoder's output
 * decodes back to an equal struct (the tests check each).
 *
 * Times travel as RFC 3339 strings and are milliseconds here.  A time
 * that may be unknown travels as null, which is 0 here; created_at,
 * updated_at and decided_at are always sent.
 */
#ifndef CNL_WIRE_JOB_H
#define CNL_WIRE_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "wire/node.h"

#define CNL_WIRE_STATE_MAX     16  /* "pending", "requeuing" */
#define CNL_WIRE_TEXT_MAX      256 /* a sentence: a reason, a check */
#define CNL_WIRE_TYPES_MAX     16  /* GPU types a job may list */
#define CNL_WIRE_NODE_LIST_MAX 16  /* names in its nodelist, its exclude */
#define CNL_WIRE_PRIO_COUNT    4   /* low, normal, high, critical */

/* ---- status: the live state of an active job or server ------------------ */

/* Pending, with the scheduler's reservation for it on a node. */
struct cnl_wire_reservation {
	char node[CNL_WIRE_NAME_MAX];
	char cluster[CNL_WIRE_NAME_MAX]; /* "" travels as null */
	int64_t at_ms;                   /* 0: null */
	char shape[CNL_WIRE_NAME_MAX];
};

/* When it will be ready, from how long recent starts took. */
struct cnl_wire_ready {
	int64_t at_ms;   /* 0: null */
	int from_starts; /* how many starts the median is of */
};

/* What a start estimate rests on. */
struct cnl_wire_estimate {
	bool approximate;        /* built on assumed run times */
	int unestimated_running; /* running work that gave no run time */
	int64_t assumed_runtime_s;
};

/*
 * "status": the phase and epoch, then either what a pending workload
 * waits for (pending: reason, estimated_start and perhaps a reservation
 * and an estimate) or where a placed one runs (node, blocks, started_at).
 */
struct cnl_wire_status {
	char phase[CNL_WIRE_STATE_MAX]; /* wire/state.h's names */
	int64_t epoch;
	bool pending;                   /* reason and estimated_start sent */
	char reason[CNL_WIRE_TEXT_MAX]; /* pending */
	int64_t estimated_start_ms;     /* pending; 0: null */
	bool has_reservation;           /* pending */
	struct cnl_wire_reservation reservation;
	char node[CNL_WIRE_NAME_MAX]; /* placed: node, blocks, started_at
	                               * sent; "" otherwise */
	int blocks;                   /* placed: 1% blocks held */
	int shrinking_to;   /* placed: a pending shrink's size (its blocks are
	                     * held until the slice's VRAM use fits); 0: none */
	int resized;        /* block slices: the size (blocks) asked by the
	                     * last resize, pending or placed; 0: never resized */
	int64_t started_ms; /* placed; 0: null */
	bool has_estimated_ready;
	struct cnl_wire_ready estimated_ready;
	bool has_estimate; /* pending with an estimated start */
	struct cnl_wire_estimate estimate;
};

json_t *cnl_wire_status_encode(const struct cnl_wire_status *m);
int cnl_wire_status_decode(const json_t *j, struct cnl_wire_status *ret,
                           char *err, size_t errlen);

/* ---- job ---------------------------------------------------------------- */

/*
 * "placement": why a job runs (or ran) where it does, as the scheduler
 * recorded it at its START decision.
 */
struct cnl_wire_placement {
	char node[CNL_WIRE_NAME_MAX];
	char reason[24]; /* "started", "backfilled", "after_preemption",
	                  * "home" */
	char reason_text[CNL_WIRE_TEXT_MAX];
	char gpu_type[CNL_WIRE_NAME_MAX]; /* "" for CPU work: absent */
	bool has_gpu_type_allowed;        /* the job listed gpu_types */
	bool gpu_type_allowed;
	bool has_dataset_local; /* the job named a dataset */
	bool dataset_local;
	int dataset_elsewhere; /* with dataset_local */
	bool has_preferred;    /* the job listed nodes it prefers */
	bool preferred;        /* the node is one of them */
	char cluster[CNL_WIRE_NAME_MAX], zone[CNL_WIRE_NAME_MAX],
	    rack[CNL_WIRE_NAME_MAX]; /* "": absent */
	int64_t decided_ms;
};

json_t *cnl_wire_placement_encode(const struct cnl_wire_placement *m);
int cnl_wire_placement_decode(const json_t *j, struct cnl_wire_placement *ret,
                              char *err, size_t errlen);

/* A member of a gang, by rank (GET /v1/jobs/{id} only). */
struct cnl_wire_gang_place {
	char id[CNL_WIRE_ID_MAX];
	int rank;
	char state[CNL_WIRE_STATE_MAX];
	char node[CNL_WIRE_NAME_MAX], zone[CNL_WIRE_NAME_MAX],
	    rack[CNL_WIRE_NAME_MAX]; /* "": absent (not placed) */
};

/* "gang": only for the members of a gang. */
struct cnl_wire_job_gang {
	char id[CNL_WIRE_ID_MAX]; /* the leader's job id (rank 0) */
	int rank, size;
	bool has_members; /* job ids by rank */
	char members[CNL_WIRE_GANG_MAX][CNL_WIRE_ID_MAX];
	int n_members;
	bool has_placements;
	struct cnl_wire_gang_place placements[CNL_WIRE_GANG_MAX];
	int n_placements;
};

/* "deadline_check": what the deadline was checked with (the reply to a
 * submission with a deadline only). */
struct cnl_wire_deadline_check {
	bool finish;               /* "checked": "finish", else "start" */
	int64_t runtime_s;         /* finish: the job's run time; else null */
	int64_t earliest_start_ms; /* 0: null */
	int unestimated_running;
	int64_t assumed_runtime_s;
	char text[CNL_WIRE_TEXT_MAX]; /* the same, in words */
};

struct cnl_wire_job {
	char id[CNL_WIRE_ID_MAX];
	char project_id[CNL_WIRE_ID_MAX], user_id[CNL_WIRE_ID_MAX];
	char command[CNL_WIRE_COMMAND_MAX];
	char profile[CNL_WIRE_NAME_MAX]; /* "" when a shape was given */
	char gpu[CNL_WIRE_NAME_MAX];     /* the shape */
	int priority;                    /* 0..3: low, normal, high, critical */
	char state[CNL_WIRE_STATE_MAX];  /* wire/state.h's store names */
	int exit_code;                   /* -255..255 */
	int64_t deadline_ms;             /* 0: null */
	int64_t runtime_s;
	int64_t created_ms, updated_ms;
	bool has_status; /* while active */
	struct cnl_wire_status status;
	bool preemptible;
	char message[CNL_WIRE_MESSAGE_MAX]; /* how it ended; "": absent */
	int64_t mem_mib, cpu_milli;         /* asked for; 0: absent */
	bool has_gpu_types;
	char gpu_types[CNL_WIRE_TYPES_MAX][CNL_WIRE_NAME_MAX];
	int n_gpu_types;
	char dataset[CNL_WIRE_NAME_MAX]; /* "": absent */
	char cluster[CNL_WIRE_NAME_MAX]; /* the one it asked for; "": any */
	char image[CNL_WIRE_IMAGE_MAX];  /* "": absent (the built-in host) */
	/* Forwarded to a peer site (server/federate.h): its name and the
	 * job's id there; "": absent. */
	char peer[CNL_WIRE_NAME_MAX];
	char peer_job[CNL_WIRE_ID_MAX];
	/* The only nodes it may run on, and those it may not (0: absent). */
	char nodelist[CNL_WIRE_NODE_LIST_MAX][CNL_WIRE_NAME_MAX];
	int n_nodelist;
	char exclude[CNL_WIRE_NODE_LIST_MAX][CNL_WIRE_NAME_MAX];
	int n_exclude;
	/* The nodes it is placed on first, and those it is placed on last
	 * (0: absent). */
	char prefer[CNL_WIRE_NODE_LIST_MAX][CNL_WIRE_NAME_MAX];
	int n_prefer;
	char avoid[CNL_WIRE_NODE_LIST_MAX][CNL_WIRE_NAME_MAX];
	int n_avoid;
	int nodes;                      /* its gang's size; 1: none */
	struct cnl_wire_job_gang *gang; /* malloc'd; NULL: none */
	bool has_placement;
	struct cnl_wire_placement placement;
	bool has_deadline_check;
	struct cnl_wire_deadline_check deadline_check;
};

json_t *cnl_wire_job_encode(const struct cnl_wire_job *m);
int cnl_wire_job_decode(const json_t *j, struct cnl_wire_job *ret, char *err,
                        size_t errlen);
void cnl_wire_job_done(struct cnl_wire_job *m);

/* "low", "normal", "high", "critical"; "?" outside 0..3. */
const char *cnl_wire_priority_name(int priority);

/* {"items": [job...], "next": the id to page on, or null}. */
struct cnl_wire_jobs {
	struct cnl_wire_job *items; /* malloc'd */
	size_t n;
	char next[CNL_WIRE_ID_MAX]; /* "": null (the last page) */
};

json_t *cnl_wire_jobs_encode(const struct cnl_wire_jobs *m);
int cnl_wire_jobs_decode(const json_t *j, struct cnl_wire_jobs *ret, char *err,
                         size_t errlen);
void cnl_wire_jobs_done(struct cnl_wire_jobs *m);

/* ---- server ------------------------------------------------------------- */

struct cnl_wire_server {
	char id[CNL_WIRE_ID_MAX];
	char project_id[CNL_WIRE_ID_MAX], user_id[CNL_WIRE_ID_MAX];
	char name[CNL_WIRE_NAME_MAX];
	char image[CNL_WIRE_IMAGE_MAX];
	char profile[CNL_WIRE_NAME_MAX];
	int64_t storage_gb, idle_timeout_s; /* idle 0: never */
	char state[CNL_WIRE_STATE_MAX];     /* wire/state.h's store names */
	char url[CNL_WIRE_URL_MAX];         /* "": null (not running) */
	int64_t created_ms;
	bool has_status; /* while active */
	struct cnl_wire_status status;
	/* Why its last run failed (its workspace volume could not be made,
	 * ...); "": absent. */
	char message[CNL_WIRE_MESSAGE_MAX];
};

json_t *cnl_wire_server_encode(const struct cnl_wire_server *m);
int cnl_wire_server_decode(const json_t *j, struct cnl_wire_server *ret,
                           char *err, size_t errlen);

/* {"items": [server...], "next": the id to page on, or null}. */
struct cnl_wire_servers {
	struct cnl_wire_server *items; /* malloc'd */
	size_t n;
	char next[CNL_WIRE_ID_MAX]; /* "": null */
};

json_t *cnl_wire_servers_encode(const struct cnl_wire_servers *m);
int cnl_wire_servers_decode(const json_t *j, struct cnl_wire_servers *ret,
                            char *err, size_t errlen);
void cnl_wire_servers_done(struct cnl_wire_servers *m);

#endif /* CNL_WIRE_JOB_H */
