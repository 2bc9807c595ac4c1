/*
 * test_catalog.c - the built-in GPU catalog matches NVIDIA's MIG tables,
 * profile choice follows the seeds' rule, and site types from config are
 * validated all-or-nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/catalog.h"

static struct cnl_catalog cat;

static const struct cnl_gpu_type *type(const char *name)
{
	int i = cnl_catalog_find(&cat, name);
	assert_true(i >= 0);
	return &cat.types[i];
}

static const struct cnl_mig_profile *prof(const char *t, const char *p)
{
	int k = cnl_mig_find(type(t), p);
	assert_true(k >= 0);
	return &type(t)->mig[k];
}

static int setup(void **state)
{
	(void)state;
	cnl_catalog_init(&cat);
	return 0;
}

static void test_builtin_types(void **state)
{
	static const char *const names[] = {"A100-40GB",
	                                    "A100-80GB",
	                                    "H100-80GB-SXM",
	                                    "H100-80GB-PCIE",
	                                    "H200-141GB",
	                                    "L40S",
	                                    "L4",
	                                    "RTX-6000-Ada",
	                                    "MI300X",
	                                    "MI250",
	                                    "MI250X",
	                                    "T4",
	                                    "P100",
	                                    "V100-16GB",
	                                    "V100-32GB",
	                                    "A10"};
	(void)state;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_true(cnl_catalog_find(&cat, names[i]) >= 0);
	assert_int_equal(cnl_catalog_find(&cat, "h100-80gb-sxm"),
	                 cnl_catalog_find(&cat, "H100-80GB-SXM"));
	assert_int_equal(cnl_catalog_find(&cat, "V100"), -CNL_EGPUTYPE);
	assert_int_equal(type("H100-80GB-SXM")->sm_count, 132);
	assert_int_equal(type("H100-80GB-PCIE")->sm_count, 114);
	assert_int_equal(type("A100-80GB")->sm_count, 108);
	assert_int_equal(type("H200-141GB")->vram_mib, 143771);
	assert_int_equal(type("L40S")->n_mig, 0);
	assert_int_equal(type("MI300X")->n_mig, 0);
	assert_string_equal(type("MI300X")->vendor, "amd");
	assert_int_equal(type("MI250X")->n_mig, 0);
	assert_int_equal(type("MI250X")->sm_count, 110);
}

/* H100 80GB, from the MIG user guide: name, compute of 7, memory of 8,
 * max instances, allowed starts. */
static void test_h100_profiles(void **state)
{
	static const struct {
		const char *name;
		int compute, mem, max, starts;
	} want[] = {
	    {"1g.10gb", 1, 1, 7, 0x7f}, {"1g.10gb+me", 1, 1, 1, 0x7f},
	    {"1g.20gb", 1, 2, 4, 0x55}, {"2g.20gb", 2, 2, 3, 0x15},
	    {"3g.40gb", 3, 4, 2, 0x11}, {"4g.40gb", 4, 4, 1, 0x01},
	    {"7g.80gb", 7, 8, 1, 0x01},
	};
	(void)state;
	assert_int_equal(type("H100-80GB-SXM")->n_mig, 7);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct cnl_mig_profile *p =
		    prof("H100-80GB-SXM", want[i].name);
		assert_int_equal(p->compute, want[i].compute);
		assert_int_equal(p->mem_slots, want[i].mem);
		assert_int_equal(p->max_instances, want[i].max);
		assert_int_equal(p->starts, want[i].starts);
	}
	assert_int_equal(prof("H100-80GB-SXM", "1g.10gb")->mem_mib, 9984);
	assert_int_equal(prof("H100-80GB-SXM", "7g.80gb")->mem_mib, 81152);
	assert_true(prof("H100-80GB-SXM", "1g.10gb+me")->media);
}

static void test_other_mig_tables(void **state)
{
	static const char *const h200[] = {"1g.18gb",   "1g.35gb", "2g.35gb",
	                                   "3g.71gb",   "4g.71gb", "7g.141gb",
	                                   "1g.18gb+me"};
	static const char *const a40[] = {"1g.5gb",   "1g.10gb", "2g.10gb",
	                                  "3g.20gb",  "4g.20gb", "7g.40gb",
	                                  "1g.5gb+me"};
	static const char *const a80[] = {"1g.10gb",   "1g.20gb", "2g.20gb",
	                                  "3g.40gb",   "4g.40gb", "7g.80gb",
	                                  "1g.10gb+me"};
	(void)state;
	for (int i = 0; i < 7; i++) {
		assert_true(cnl_mig_find(type("H200-141GB"), h200[i]) >= 0);
		assert_true(cnl_mig_find(type("A100-40GB"), a40[i]) >= 0);
		assert_true(cnl_mig_find(type("A100-80GB"), a80[i]) >= 0);
	}
	assert_int_equal(prof("H200-141GB", "1g.35gb")->mem_slots, 2);
	assert_int_equal(prof("H200-141GB", "1g.18gb")->mem_mib, 16384);
	assert_int_equal(prof("A100-40GB", "1g.10gb")->max_instances, 4);
	assert_int_equal(prof("A100-40GB", "3g.20gb")->starts, 0x11);
	/* The 40 GB A100 has no 1g.20gb; the H100's 2g.20gb is not a
	 * profile of the L40S, which has no MIG at all. */
	assert_int_equal(cnl_mig_find(type("A100-40GB"), "1g.20gb"),
	                 -CNL_EPROFILE);
	assert_int_equal(cnl_mig_find(type("L40S"), "2g.20gb"), -CNL_ENOMIG);
}

static void test_pick_profile(void **state)
{
	const struct cnl_gpu_type *h100 = type("H100-80GB-SXM");
	(void)state;
	/* Seeds: 25% -> 2g.20gb; 50% -> 4g.40gb. */
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 25)].name, "2g.20gb");
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 50)].name, "4g.40gb");
	/* 15%: one slice is 14.3% of compute, too little -> 2g. */
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 15)].name, "2g.20gb");
	/* 29%: two slices are 28.6% -> 3g. */
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 29)].name, "3g.40gb");
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 14)].name, "1g.20gb");
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 12)].name, "1g.10gb");
	assert_string_equal(h100->mig[cnl_mig_pick(h100, 58)].name, "7g.80gb");
	assert_string_equal(
	    type("H200-141GB")->mig[cnl_mig_pick(type("H200-141GB"), 25)].name,
	    "2g.35gb");
	assert_int_equal(cnl_mig_pick(h100, 0), -CNL_EBLOCKS);
	assert_int_equal(cnl_mig_pick(h100, 101), -CNL_EBLOCKS);
	assert_int_equal(cnl_mig_pick(type("L4"), 25), -CNL_ENOMIG);
}

static void test_host_profile(void **state)
{
	(void)state;
	/* The host must hold 14 blocks of 1% VRAM: two memory slices. */
	assert_string_equal(type("H100-80GB-SXM")
	                        ->mig[type("H100-80GB-SXM")->host_profile]
	                        .name,
	                    "1g.20gb");
	assert_string_equal(
	    type("A100-40GB")->mig[type("A100-40GB")->host_profile].name,
	    "1g.10gb");
	assert_string_equal(
	    type("H200-141GB")->mig[type("H200-141GB")->host_profile].name,
	    "1g.35gb");
	assert_int_equal(type("L40S")->host_profile, -1);
}

static int add_json(const char *text, char *err, size_t errlen)
{
	json_error_t je;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
	assert_non_null(v);
	int r = cnl_catalog_add_json(&cat, v, err, errlen);
	json_decref(v);
	return r;
}

static void test_site_types(void **state)
{
	char err[256];
	int n0 = cat.n;
	(void)state;
	assert_int_equal(
	    add_json("{\"name\": \"RTX-A5000\", \"vendor\": \"nvidia\", "
	             "\"sm_count\": 64, \"vram_mib\": 24564}",
	             err, sizeof(err)),
	    0);
	assert_int_equal(cat.n, n0 + 1);
	assert_int_equal(type("RTX-A5000")->vram_mib, 24564);
	assert_int_equal(type("RTX-A5000")->n_mig, 0);
	assert_int_equal(
	    add_json("[{\"name\": \"X30\", \"sm_count\": 56, "
	             "\"vram_mib\": 24576, \"mig\": ["
	             "{\"name\": \"1g.6gb\", \"compute\": 1, \"mem_slots\": "
	             "2, \"mem_mib\": 5836, \"max_instances\": 4, "
	             "\"starts\": [0,2,4,6]},"
	             "{\"name\": \"4g.24gb\", \"compute\": 4, \"mem_slots\": "
	             "8, \"mem_mib\": 23552, \"max_instances\": 1, "
	             "\"starts\": [0]}]}]",
	             err, sizeof(err)),
	    0);
	assert_string_equal(type("X30")->vendor, "site");
	assert_int_equal(type("X30")->n_mig, 2);
	assert_int_equal(prof("X30", "1g.6gb")->starts, 0x55);
	/* 2 of 8 memory slices can hold 14 blocks: it hosts blocks. */
	assert_int_equal(type("X30")->host_profile, 0);
}

static void test_site_type_errors(void **state)
{
	static const struct {
		const char *json;
		int code;
		const char *needle;
	} bad[] = {
	    {"{\"name\": \"T4\", \"sm_count\": 40, \"vram_mib\": 1}", -CNL_EDUP,
	     "already defined"},
	    {"{\"name\": \"Y\", \"sm_count\": 40, \"vram_mib\": 1, "
	     "\"colour\": 1}",
	     -CNL_EFIELD, "unknown field \"colour\""},
	    {"{\"name\": \"Y\", \"sm_count\": \"40\", \"vram_mib\": 1}",
	     -CNL_EFIELD, "\"sm_count\" must be an integer"},
	    {"{\"name\": \"Y\", \"sm_count\": 40}", -CNL_EFIELD,
	     "missing field \"vram_mib\""},
	    {"{\"name\": \"Y\", \"sm_count\": 40, \"vram_mib\": -5}",
	     -CNL_ECONFIG, "\"vram_mib\" is out of range"},
	    {"{\"name\": \"Y\", \"sm_count\": 4, \"vram_mib\": 100, \"mig\": "
	     "[{\"name\": \"3g\", \"compute\": 3, \"mem_slots\": 4, "
	     "\"mem_mib\": 50, \"max_instances\": 2, \"starts\": [0, 5]}]}",
	     -CNL_ECONFIG, "runs past the last slice"},
	    {"{\"name\": \"Y\", \"sm_count\": 4, \"vram_mib\": 100, \"mig\": "
	     "[{\"name\": \"1g\", \"compute\": 9, \"mem_slots\": 1, "
	     "\"mem_mib\": 5, \"max_instances\": 2, \"starts\": [0]}]}",
	     -CNL_ECONFIG, "\"compute\" is out of range"},
	    {"{\"name\": \"Y\", \"sm_count\": 4, \"vram_mib\": 100, \"mig\": "
	     "[{\"name\": \"1g\", \"compute\": 1, \"mem_slots\": 1, "
	     "\"mem_mib\": 5, \"max_instances\": 2, \"starts\": []}]}",
	     -CNL_EFIELD, "non-empty array"},
	    {"{\"name\": \"Y\", \"sm_count\": 4, \"vram_mib\": 100, \"mig\": "
	     "[{\"name\": \"1g\", \"compute\": 1, \"mem_slots\": 1, "
	     "\"mem_mib\": 500, \"max_instances\": 2, \"starts\": [0]}]}",
	     -CNL_ECONFIG, "mem_mib must be"},
	    {"[{\"name\": \"Z1\", \"sm_count\": 4, \"vram_mib\": 100}, "
	     "{\"name\": \"Z2\", \"sm_count\": 4}]",
	     -CNL_EFIELD, "GPU type \"Z2\": missing field"},
	    {"[{\"name\": \"Z3\", \"sm_count\": 4, \"vram_mib\": 100}, "
	     "{\"name\": \"Z3\", \"sm_count\": 4, \"vram_mib\": 100}]",
	     -CNL_EDUP, "\"Z3\" is already defined"},
	    {"42", -CNL_EFIELD, "must be an object"},
	};
	char err[256];
	(void)state;
	assert_true(cnl_catalog_find(&cat, "T4") >= 0); /* built in */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cnl_catalog before = cat;
		err[0] = '\0';
		int r = add_json(bad[i].json, err, sizeof(err));
		if (r != bad[i].code || !strstr(err, bad[i].needle))
			fail_msg("case %zu: got %d \"%s\", want %d \"%s\"", i,
			         r, err, bad[i].code, bad[i].needle);
		/* All or nothing: the catalog is exactly as before. */
		assert_memory_equal(&before, &cat, sizeof(cat));
	}
	assert_int_equal(cnl_catalog_find(&cat, "Z1"), -CNL_EGPUTYPE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_builtin_types, setup),
	    cmocka_unit_test_setup(test_h100_profiles, setup),
	    cmocka_unit_test_setup(test_other_mig_tables, setup),
	    cmocka_unit_test_setup(test_pick_profile, setup),
	    cmocka_unit_test_setup(test_host_profile, setup),
	    cmocka_unit_test_setup(test_site_types, setup),
	    cmocka_unit_test_setup(test_site_type_errors, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
