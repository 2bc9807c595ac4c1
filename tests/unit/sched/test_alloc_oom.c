/*
 * test_alloc_oom.c - fault injection (after SQLite's and curl's torture
 * tests): the test binary wraps malloc, calloc and realloc at link time,
 * and a scripted sequence of cluster operations is replayed with the N-th
 * allocation failing, for every N until the script runs clean.  Every
 * operation that fails with -ENOMEM must leave the cluster exactly as it
 * was (same digest, invariants intact), and the script must then carry on.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/alloc.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);

static long countdown = -1; /* fail when it reaches 0; -1: never */
static long injected;

static int should_fail(void)
{
	if (countdown < 0)
		return 0;
	if (countdown-- == 0) {
		injected++;
		return 1;
	}
	return 0;
}

void *__wrap_malloc(size_t n)
{
	return should_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t a, size_t b)
{
	return should_fail() ? NULL : __real_calloc(a, b);
}

void *__wrap_realloc(void *p, size_t n)
{
	return should_fail() ? NULL : __real_realloc(p, n);
}

static uint64_t digest(const struct cnl_cluster *c)
{
	uint64_t h = 1469598103934665603ULL;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ULL)
	MIX(c->n_nodes);
	MIX(c->n_allocs);
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		MIX(n->cpu_used);
		MIX(n->mem_used);
		for (int g = 0; g < n->n_gpus; g++) {
			MIX(n->gpus[g].mask[0]);
			MIX(n->gpus[g].mask[1]);
			MIX(n->gpus[g].n_allocs);
			MIX(n->gpus[g].sm_mask);
			MIX(n->gpus[g].n_projs);
		}
	}
	for (uint32_t s = 0; s < c->n_slots; s++)
		MIX(c->slots[s].id);
#undef MIX
	return h;
}

static void ok_or_oom(struct cnl_cluster *c, int rc, uint64_t before)
{
	char err[256];

	if (rc == -ENOMEM)
		assert_true(digest(c) == before);
	else
		assert_true(rc >= 0);
	long saved = countdown;
	countdown = -1; /* the checker itself must not be failed */
	if (cnl_cluster_check(c, err, sizeof(err)) != 0)
		fail_msg("after %s: %s", cnl_strerror(rc), err);
	countdown = saved;
}

/* One pass over the script; returns the number of injected failures. */
static long script(long fail_at)
{
	struct cnl_catalog cat;
	struct cnl_cluster *c = NULL;
	uint32_t ids[512];
	int n_ids = 0;
	static const char *const types[] = {"H100-80GB-SXM", "A100-40GB",
	                                    "L40S"};

	cnl_catalog_init(&cat);
	injected = 0;
	countdown = fail_at;
	while (cnl_cluster_new(&cat, &c) == -ENOMEM)
		;
	for (int i = 0; i < 80; i++) {
		char name[16];
		snprintf(name, sizeof(name), "n%d", i);
		struct cnl_node_spec s = {
		    .name = name,
		    .gpu_type = cnl_catalog_find(&cat, types[i % 3]),
		    .n_gpus = 1 + i % 4,
		    .cpu_milli = 32000,
		    .mem_mib = 65536};
		int rc;
		do {
			uint64_t before = digest(c);
			rc = cnl_cluster_add_node(c, &s);
			ok_or_oom(c, rc, before);
		} while (rc == -ENOMEM);
	}
	for (int i = 0; i < 400; i++) {
		struct cnl_alloc_req r = {.gpu_type = CNL_GPU_TYPE_ANY,
		                          .project = 1 + (uint32_t)(i % 37),
		                          .cpu_milli = 100};
		switch (i % 5) {
		case 0:
		case 1:
			r.kind = CNL_REQ_BLOCKS;
			r.blocks = 1 + (i * 7) % 14;
			break;
		case 2:
			r.kind = CNL_REQ_BLOCKS;
			r.blocks = 15 + (i * 13) % 60;
			break;
		case 3:
			r.kind = CNL_REQ_MIG;
			r.profile = (i / 5) % 2 ? "1g.10gb" : "3g.20gb";
			break;
		default:
			r.kind = CNL_REQ_WHOLE;
			r.gpus = 1 + i % 2;
		}
		uint32_t id;
		uint64_t before = digest(c);
		int rc = cnl_alloc_place(c, &r, &id);
		if (rc == -CNL_ENOSPACE || rc == -CNL_EPROFILE)
			continue;
		ok_or_oom(c, rc, before);
		if (rc == 0)
			ids[n_ids++] = id;
		if (i % 3 == 2 && n_ids > 0) {
			assert_int_equal(cnl_alloc_free(c, ids[0]), 0);
			ids[0] = ids[--n_ids];
		}
	}
	countdown = -1;
	while (n_ids > 0)
		assert_int_equal(cnl_alloc_free(c, ids[--n_ids]), 0);
	assert_int_equal(c->n_allocs, 0);
	cnl_cluster_free(c);
	return injected;
}

static void test_every_allocation_failure(void **state)
{
	long points = 0;
	(void)state;
	/* Fail the first, second, ... allocation until none is reached. */
	for (long n = 0; n < 100000; n++) {
		if (script(n) == 0)
			break;
		points++;
	}
	print_message("%ld allocation failure points exercised\n", points);
	assert_true(points > 20); /* the script does allocate */
	assert_int_equal(script(-1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_allocation_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
