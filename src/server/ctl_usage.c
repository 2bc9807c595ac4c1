/*
 * ctl_usage.c - GPU use per UTC day, project and user: the record behind
 * the dashboard's 7-day curves (usage_7d, docs/dashboard.md).
 *
 * The meter (ctl_loop.c) charges each placed workload's held blocks for
 * the time since its last tick; cnl_usage_day_add() splits that interval
 * at each UTC midnight and adds each part to the day it belongs to, under
 * the key "YYYY-MM-DD/<project id>/<user id>" (value: block-milliseconds,
 * 100 blocks = one whole GPU, a MIG instance its fraction of the GPU in
 * blocks, as cnl_alloc_blocks_held() counts it).  The keys it touched are
 * noted in @dirty; the flush writes them as store documents of kind
 * "usage_day" in the same transaction as the owners' running totals, so a
 * day's figure and the totals never disagree, and a restart carries on
 * from the last flush: the meter's clock restarts at the new process's
 * start, so time is never charged twice (time between the last flush and
 * a crash is not charged at all, at most one tick's worth).
 *
 * Pure functions over JSON objects: no lock, no store, unit-testable.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/ctl.h"

#define DAY_MS 86400000LL

/* "YYYY-MM-DD" of the UTC day holding @ms. */
static void day_name(int64_t ms, char buf[16])
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	if (strftime(buf, 16, "%Y-%m-%d", &tm) == 0)
		buf[0] = '\0';
}

void cnl_usage_day_add(json_t *days, json_t *dirty, const char *project,
                       const char *user, int64_t from_ms, int64_t to_ms,
                       double blocks)
{
	while (from_ms < to_ms) {
		int64_t end = (from_ms / DAY_MS + 1) * DAY_MS;
		char day[16], key[256];
		json_t *v;

		if (end > to_ms)
			end = to_ms;
		day_name(from_ms, day);
		snprintf(key, sizeof(key), "%s/%s/%s", day, project, user);
		v = json_object_get(days, key);
		json_object_set_new(
		    days, key,
		    json_real(json_number_value(v) +
		              blocks * (double)(end - from_ms)));
		if (dirty)
			json_object_set_new(dirty, key, json_true());
		from_ms = end;
	}
}

void cnl_usage_7d(const json_t *days, const char *project, const char *user,
                  int64_t now_ms, double ret[7])
{
	char names[7][16];
	const char *k;
	json_t *v;
	size_t pl = strlen(project);

	for (int d = 0; d < 7; d++) {
		day_name(now_ms - (int64_t)(6 - d) * DAY_MS, names[d]);
		ret[d] = 0;
	}
	json_object_foreach ((json_t *)days, k, v) {
		const char *rest = k + 11; /* past "YYYY-MM-DD/" */

		if (strlen(k) < 11 || strncmp(rest, project, pl) != 0 ||
		    rest[pl] != '/' ||
		    (user && strcmp(rest + pl + 1, user) != 0))
			continue;
		for (int d = 0; d < 7; d++)
			if (strncmp(k, names[d], 10) == 0)
				ret[d] +=
				    json_number_value(v) / 100.0 / 3600000.0;
	}
}

json_t *cnl_usage_recent(const json_t *days, int64_t now_ms)
{
	char first[16];
	json_t *ret = json_object(), *v;
	const char *k;

	day_name(now_ms - 6 * DAY_MS, first);
	json_object_foreach ((json_t *)days, k, v)
		if (strlen(k) > 11 && strncmp(k, first, 10) >= 0 &&
		    json_number_value(v) > 0)
			json_object_set_new(ret, k + 11, json_true());
	return ret;
}

void cnl_usage_day_after(int64_t now_ms, char *buf, size_t len)
{
	char day[16];

	day_name(now_ms - 7 * DAY_MS, day);
	snprintf(buf, len, "%s/~", day);
}

void cnl_usage_prune(json_t *days, const json_t *dirty, int64_t now_ms)
{
	char first[16];
	const char *k;
	json_t *v, *tmp;

	day_name(now_ms - 6 * DAY_MS, first);
	json_object_foreach_safe (days, tmp, k, v)
		if (strncmp(k, first, 10) < 0 && !json_object_get(dirty, k))
			json_object_del(days, k);
}
