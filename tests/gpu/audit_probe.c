/*
 * audit_probe.c - what the agent's GPU memory audit reads, on a real GPU
 * (tests/gpu/audit.sh): the nvml provider's cnl_gpus_procs must list the
 * host pid @PID holding at least @MIN bytes, as the real driver counts
 * them, and the audit's decision must pick it under a quota of half that.
 *
 *   audit_probe PID MIN_BYTES [LIBNVIDIA_ML]
 *
 * Exit 0 when both hold, 1 otherwise (with what was listed), 2 on usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "agent/gpu.h"
#include "agent/gpu_audit.h"
#include "sched/catalog.h"

int main(int argc, char **argv)
{
	static struct cnl_gpu_proc ps[1024];
	struct cnl_catalog cat;
	struct cnl_gpus *g = NULL;
	char spec[600], err[400];
	long pid;
	unsigned long long min;
	int n = 0;

	if (argc < 3 || (pid = strtol(argv[1], NULL, 10)) <= 0 ||
	    !(min = strtoull(argv[2], NULL, 10))) {
		fprintf(stderr, "usage: audit_probe PID MIN_BYTES [LIB]\n");
		return 2;
	}
	snprintf(spec, sizeof(spec), "nvml%s%s", argc > 3 ? ":" : "",
	         argc > 3 ? argv[3] : "");
	cnl_catalog_init(&cat);
	if (cnl_gpus_open(spec, &cat, &g, err, sizeof(err)) < 0) {
		fprintf(stderr, "audit_probe: %s\n", err);
		return 1;
	}
	/* The driver may take a moment to show a new context's memory. */
	for (int tries = 0; tries < 50; tries++) {
		n = cnl_gpus_procs(g, ps, 1024);
		for (int i = 0; i < n && i < 1024; i++) {
			struct cnl_audit_proc p = {ps[i].pid, ps[i].used};
			int idx[1];

			if (ps[i].pid != pid ||
			    ps[i].used == CNL_GPU_USED_UNKNOWN ||
			    ps[i].used < min)
				continue;
			printf("pid %d on GPU %d holds %llu bytes\n", ps[i].pid,
			       ps[i].gpu, (unsigned long long)ps[i].used);
			if (cnl_gpu_audit_pick(&p, 1, min / 2,
			                       CNL_GPU_AUDIT_GRANULE,
			                       idx) != 1) {
				fprintf(stderr, "audit_probe: not picked under "
				                "a quota of half its use\n");
				cnl_gpus_close(g);
				return 1;
			}
			cnl_gpus_close(g);
			return 0;
		}
		usleep(200 * 1000);
	}
	fprintf(stderr,
	        "audit_probe: pid %ld not listed with %llu bytes (%d "
	        "entries):\n",
	        pid, min, n);
	for (int i = 0; i < n && i < 1024; i++)
		fprintf(stderr, "  pid %d gpu %d used %llu\n", ps[i].pid,
		        ps[i].gpu, (unsigned long long)ps[i].used);
	cnl_gpus_close(g);
	return 1;
}
