/*
 * fuzz_wire.c - fuzz target for the strict JSON decoders of the wire
 * protocol (src/wire: node.c, job.c, state.c): the first byte of the input
 * chooses a decoder, the rest is the JSON text a peer would send.  A
 * decoder must refuse or accept without a crash, a leak or a read out of
 * bounds, and what it accepts must encode again and decode the same way
 * (checked for the node-protocol messages, where a round trip exists).
 *
 * Built with libFuzzer (-DCNL_FUZZ=ON) and with replay.c's main(), as
 * fuzz_http.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/job.h"
#include "wire/node.h"
#include "wire/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decode @j as @T; run its _done when @D.  The ret is zeroed first. */
#define DECODE(T, fn)                              \
	do {                                       \
		T m;                               \
		memset(&m, 0, sizeof(m));          \
		(void)fn(j, &m, err, sizeof(err)); \
	} while (0)
#define DECODE_DONE(T, fn, done)                   \
	do {                                       \
		T m;                               \
		memset(&m, 0, sizeof(m));          \
		(void)fn(j, &m, err, sizeof(err)); \
		done(&m);                          \
	} while (0)

/* Decode, encode what was accepted, decode that again: both accepted. */
#define ROUND(T, fn, enc, done)                                          \
	do {                                                             \
		T m, m2;                                                 \
		memset(&m, 0, sizeof(m));                                \
		memset(&m2, 0, sizeof(m2));                              \
		if (fn(j, &m, err, sizeof(err)) >= 0) {                  \
			json_t *e = enc(&m);                             \
			if (e && fn(e, &m2, err, sizeof(err)) < 0) {     \
				fprintf(stderr, "re-decode: %s\n", err); \
				abort();                                 \
			}                                                \
			json_decref(e);                                  \
		}                                                        \
		done(&m);                                                \
		done(&m2);                                               \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	json_t *j;
	unsigned which;

	if (size < 1)
		return 0;
	which = data[0];
	j = json_loadb((const char *)data + 1, size - 1,
	               JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	if (!j)
		return 0;
	switch (which % 16) {
	case 0:
		DECODE(struct cnl_wire_register, cnl_wire_register_decode);
		break;
	case 1:
		DECODE_DONE(struct cnl_wire_node, cnl_wire_node_decode,
		            cnl_wire_node_done);
		break;
	case 2:
		DECODE_DONE(struct cnl_wire_heartbeat,
		            cnl_wire_heartbeat_decode, cnl_wire_heartbeat_done);
		break;
	case 3:
		DECODE(struct cnl_wire_assignment, cnl_wire_assignment_decode);
		break;
	case 4:
		ROUND(struct cnl_wire_assignments, cnl_wire_assignments_decode,
		      cnl_wire_assignments_encode, cnl_wire_assignments_done);
		break;
	case 5:
		DECODE(struct cnl_wire_report, cnl_wire_report_decode);
		break;
	case 6:
		DECODE_DONE(struct cnl_wire_log, cnl_wire_log_decode,
		            cnl_wire_log_done);
		break;
	case 7:
		DECODE(struct cnl_wire_file, cnl_wire_file_decode);
		break;
	case 8:
		DECODE_DONE(struct cnl_wire_files, cnl_wire_files_decode,
		            cnl_wire_files_done);
		break;
	case 9:
		DECODE_DONE(struct cnl_wire_tunnels, cnl_wire_tunnels_decode,
		            cnl_wire_tunnels_done);
		break;
	case 10:
		DECODE(struct cnl_wire_status, cnl_wire_status_decode);
		break;
	case 11:
		DECODE(struct cnl_wire_placement, cnl_wire_placement_decode);
		break;
	case 12:
		DECODE_DONE(struct cnl_wire_job, cnl_wire_job_decode,
		            cnl_wire_job_done);
		break;
	case 13:
		DECODE_DONE(struct cnl_wire_jobs, cnl_wire_jobs_decode,
		            cnl_wire_jobs_done);
		break;
	case 14:
		DECODE_DONE(struct cnl_wire_servers, cnl_wire_servers_decode,
		            cnl_wire_servers_done);
		break;
	case 15: {
		/* state.c: the names of states, each parsed back. */
		const char *s = json_string_value(j);
		enum cnl_wl_state st;

		if (s && cnl_wl_state_parse(s, &st) == 0 &&
		    strcmp(cnl_wl_state_name(st), s) != 0)
			abort();
		break;
	}
	}
	json_decref(j);
	return 0;
}
