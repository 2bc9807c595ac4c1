/*
 * region_tool.c - cnlab-region, a small command line over region.h for
 * operators, scripts and the GPU tests until the node agent drives regions
 * itself:
 *
 *   cnlab-region create PATH [--quota BYTES] [--share PCT] [--project P]
 *                [--ipc-dir DIR] [--ctx BYTES] [--board PATH --slot N]
 *   cnlab-region board PATH               create a GPU board
 *   cnlab-region set-quota PATH BYTES     in flight
 *   cnlab-region set-share PATH PCT       in flight
 *   cnlab-region reap PATH                return dead processes' memory
 *   cnlab-region stat PATH                key=value lines (dead processes
 *                                         reaped first)
 *
 * Nothing here takes a lock a tenant could hold: stat reads atomics, and
 * reap tries the slots' byte locks without waiting (region.h).  set-quota
 * and set-share need write access to the limits file PATH (root, for a
 * region the agent made).
 *
 * BYTES accepts a K, M or G suffix (powers of two).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/region.h"

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'G':
		v <<= 30;
		end++;
		break;
	default:
		break;
	}
	if (*end)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int usage(void)
{
	fputs("usage: cnlab-region create PATH [--quota BYTES] [--share PCT] "
	      "[--project P]\n"
	      "                    [--ipc-dir DIR] [--ctx BYTES] "
	      "[--board PATH --slot N]\n"
	      "       cnlab-region board PATH\n"
	      "       cnlab-region set-quota PATH BYTES\n"
	      "       cnlab-region set-share PATH PCT\n"
	      "       cnlab-region reap PATH\n"
	      "       cnlab-region stat PATH\n",
	      stderr);
	return 2;
}

static int cmd_create(int argc, char **argv)
{
	struct cnl_region_opts o = {0};
	const char *project = "default";
	uint64_t quota = 0, share = 0, v;
	int rc;

	for (int i = 3; i < argc; i += 2) {
		if (i + 1 >= argc)
			return usage();
		if (strcmp(argv[i], "--project") == 0)
			project = argv[i + 1];
		else if (strcmp(argv[i], "--ipc-dir") == 0)
			o.ipc_dir = argv[i + 1];
		else if (strcmp(argv[i], "--board") == 0)
			o.board = argv[i + 1];
		else if (parse_u64(argv[i + 1], &v) < 0)
			return usage();
		else if (strcmp(argv[i], "--quota") == 0)
			quota = v;
		else if (strcmp(argv[i], "--share") == 0)
			share = v;
		else if (strcmp(argv[i], "--ctx") == 0)
			o.ctx_reserve = v;
		else if (strcmp(argv[i], "--slot") == 0 && v < CNL_BOARD_SLICES)
			o.board_slot = (unsigned)v;
		else
			return usage();
	}
	if (share > 100)
		return usage();
	rc = cnl_region_create(argv[2], quota, (unsigned)share, project, &o);
	if (rc < 0)
		fprintf(stderr, "cnlab-region: %s: %s\n", argv[2],
		        strerror(-rc));
	return rc < 0;
}

static int with_region(const char *path, struct cnl_region_handle *h)
{
	int rc = cnl_region_map(path, h);

	if (rc < 0)
		fprintf(stderr, "cnlab-region: %s: %s\n", path, strerror(-rc));
	return rc;
}

int main(int argc, char **argv)
{
	struct cnl_region_handle h;
	struct cnl_region_stat st;
	uint64_t v = 0;
	int rc = 0;

	if (argc < 3)
		return usage();
	if (strcmp(argv[1], "create") == 0)
		return cmd_create(argc, argv);
	if (strcmp(argv[1], "board") == 0) {
		rc = cnl_board_create(argv[2]);
		if (rc < 0)
			fprintf(stderr, "cnlab-region: %s\n", strerror(-rc));
		return rc < 0;
	}
	if ((strcmp(argv[1], "set-quota") == 0 ||
	     strcmp(argv[1], "set-share") == 0) &&
	    (argc != 4 || parse_u64(argv[3], &v) < 0))
		return usage();
	if (with_region(argv[2], &h) < 0)
		return 1;
	if (strcmp(argv[1], "set-quota") == 0) {
		rc = cnl_region_set_quota(h.r, v);
	} else if (strcmp(argv[1], "set-share") == 0) {
		rc = v > 100 ? -EINVAL : cnl_region_set_share(h.r, (unsigned)v);
	} else if (strcmp(argv[1], "reap") == 0) {
		rc = cnl_region_reap(&h, -1);
		if (rc >= 0)
			printf("reaped=%d\n", rc);
	} else if (strcmp(argv[1], "stat") == 0) {
		rc = cnl_region_stat(h.r, &st);
		printf("project=%s\nquota=%llu\nshare_pct=%u\nused=%llu\n"
		       "peak=%llu\noom=%llu\nreaped=%llu\nspins=%llu\n"
		       "procs=%u\n",
		       h.r->project, (unsigned long long)st.quota,
		       (unsigned)atomic_load(&h.r->share_pct),
		       (unsigned long long)st.used, (unsigned long long)st.peak,
		       (unsigned long long)st.oom,
		       (unsigned long long)st.reaped,
		       (unsigned long long)st.spins, st.nprocs);
		for (unsigned i = 0; i < st.nprocs; i++)
			printf("proc slot=%d pid=%d host_pid=%d used=%llu "
			       "peak=%llu busy_ns=%llu launches=%llu\n",
			       st.procs[i].slot, (int)st.procs[i].pid,
			       (int)st.procs[i].host_pid,
			       (unsigned long long)st.procs[i].used,
			       (unsigned long long)st.procs[i].peak,
			       (unsigned long long)st.procs[i].busy_ns,
			       (unsigned long long)st.procs[i].launches);
	} else {
		rc = -EINVAL;
		usage();
	}
	if (rc < 0 && rc != -EINVAL)
		fprintf(stderr, "cnlab-region: %s\n", strerror(-rc));
	cnl_region_unmap(&h);
	return rc < 0;
}
