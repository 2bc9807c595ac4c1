/*
 * fixture.h - the simulator tests' fixture: a temporary directory per test
 * holding nodes.csv and pods.csv, written with put() and loaded as a world
 * with load().  Included by one test file each, so the functions are
 * static.
 */
#ifndef CNL_TEST_SIM_FIXTURE_H
#define CNL_TEST_SIM_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sim/fgd.h"

static char dir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/cnl_sim_XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char p[512];
	(void)state;
	snprintf(p, sizeof(p), "%s/nodes.csv", dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/pods.csv", dir);
	unlink(p);
	rmdir(dir);
	return 0;
}

static void put(const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void load(struct cnl_fgd_world *w)
{
	char n[512], p[512], err[512] = "";
	snprintf(n, sizeof(n), "%s/nodes.csv", dir);
	snprintf(p, sizeof(p), "%s/pods.csv", dir);
	if (cnl_fgd_world_load(w, n, p, err, sizeof(err)) < 0)
		fail_msg("%s", err);
}

#endif /* CNL_TEST_SIM_FIXTURE_H */
