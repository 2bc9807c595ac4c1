/*
 * test_gpu.c - the agent's GPU providers: the fake pool from its spec, and
 * the nvml provider against tests/fakes' libnvidia-ml.so.1 (FAKE_NVML, the
 * built library's path), configured per test through the fake's
 * environment variables, which it reads when nvmlInit takes its first
 * reference (see tests/fakes/fake_nvml.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/gpu.h"
#include "cnlab/errors.h"
#include "fake_gpu.h"
#include "sched/catalog.h"

static struct cnl_catalog cat;

static const char *const fake_vars[] = {"FAKE_NVML_GPUS",      "FAKE_NVML_NAME",
                                        "FAKE_NVML_MEM_MIB",   "FAKE_NVML_MIG",
                                        "FAKE_NVML_MIG_RESET", "FAKE_NVML_LOST",
                                        "CNL_FAKE_GPU",        "CNL_FAKE_MEM"};

/* A node of @n fake H100 SXM GPUs, 80 GB each, and nothing else set. */
static void node_env(const char *n)
{
	for (size_t i = 0; i < sizeof(fake_vars) / sizeof(fake_vars[0]); i++)
		unsetenv(fake_vars[i]);
	setenv("FAKE_NVML_GPUS", n, 1);
	setenv("FAKE_NVML_NAME", "NVIDIA H100 80GB HBM3", 1);
	setenv("FAKE_NVML_MEM_MIB", "81559", 1);
}

static struct cnl_gpus *open_ok(const char *spec)
{
	struct cnl_gpus *g = NULL;
	char err[256] = "";
	int r = cnl_gpus_open(spec, &cat, &g, err, sizeof(err));

	if (r != 0)
		fail_msg("open %s: %s (%s)", spec, cnl_strerror(r), err);
	return g;
}

static struct cnl_gpus *open_nvml(void)
{
	return open_ok("nvml:" FAKE_NVML);
}

/* Open @spec expecting error @want, with @needle in the message. */
static void open_fails(const char *spec, int want, const char *needle)
{
	struct cnl_gpus *g = NULL;
	char err[256] = "";
	int r = cnl_gpus_open(spec, &cat, &g, err, sizeof(err));

	if (r != want || !strstr(err, needle))
		fail_msg("open %s: got %d (%s), want %d with \"%s\"", spec, r,
		         err, want, needle);
	assert_null(g);
}

/* ---- fake provider ------------------------------------------------------ */

static void test_fake_spec(void **state)
{
	const struct cnl_gpu_dev *d;
	struct cnl_gpus *g = open_ok("fake:2xH100-80GB-SXM,1xH100-80GB-SXM");

	assert_string_equal(cnl_gpus_kind(g), "fake");
	assert_int_equal(cnl_gpus_list(g, &d), 3);
	assert_string_equal(d[2].type, "H100-80GB-SXM");
	assert_int_equal(d[2].index, 2);
	assert_int_equal(d[0].mem_mib, 81559);
	assert_string_not_equal(d[0].uuid, d[1].uuid);
	assert_true(d[1].healthy);
	cnl_gpus_close(g);

	open_fails("fake:0xH100-80GB-SXM", -CNL_ECONFIG, "count \"0\"");
	open_fails("fake:17xH100-80GB-SXM", -CNL_ECONFIG, "count \"17\"");
	open_fails("fake:twoxH100", -CNL_ECONFIG, "count \"two\"");
	open_fails("fake:H100", -CNL_ECONFIG, "\"H100\" is not COUNTxTYPE");
	open_fails("fake:1xB300-288GB", -CNL_EGPUTYPE, "\"B300-288GB\"");
	open_fails("fake:1xH100-80GB-SXM,1xA100-40GB", -CNL_ECONFIG,
	           "one GPU type per node (H100-80GB-SXM and A100-40GB");
	open_fails("fake:", -CNL_ECONFIG, "no GPUs");
	open_fails("cuda", -CNL_ECONFIG, "\"cuda\"");
}

static void test_fake_mig(void **state)
{
	struct cnl_gpus *g = open_ok("fake:2xA100-40GB");
	char u[CNL_GPU_UUID_MAX], v[CNL_GPU_UUID_MAX];

	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.20gb", 4, u), 0);
	assert_string_equal(u, "MIG-fake-1-3g.20gb-4");
	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.20gb", 4, v), -CNL_EDUP);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "1g.5gb", 0, v), 0);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 2);
	assert_int_equal(cnl_gpus_mig_count(g, 0), 0);
	assert_int_equal(cnl_gpus_mig_create(g, 0, "9g.99gb", 0, v),
	                 -CNL_ENOMIG);
	assert_int_equal(cnl_gpus_mig_create(g, 2, "1g.5gb", 0, v),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_gpus_mig_destroy(g, u), 0);
	assert_int_equal(cnl_gpus_mig_destroy(g, u), -CNL_ENOTFOUND);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 1);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.20gb", 4, u), 0);
	cnl_gpus_close(g);

	/* A type without MIG. */
	g = open_ok("fake:1xL40S");
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u),
	                 -CNL_ENOMIG);
	cnl_gpus_close(g);
}

/* ---- nvml provider against the fake NVML -------------------------------- */

static void test_nvml_list(void **state)
{
	const struct cnl_gpu_dev *d;
	struct cnl_gpus *g;

	node_env("2");
	g = open_nvml();
	assert_string_equal(cnl_gpus_kind(g), "nvml");
	assert_int_equal(cnl_gpus_list(g, &d), 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(d[i].index, i);
		assert_string_equal(d[i].type, "H100-80GB-SXM");
		assert_int_equal(d[i].mem_mib, 81559);
		assert_true(d[i].healthy);
		assert_memory_equal(d[i].uuid, "GPU-fake-", 9);
	}
	assert_string_not_equal(d[0].uuid, d[1].uuid);
	assert_int_equal(cnl_gpus_mig_count(g, 0), 0);
	cnl_gpus_close(g);

	/* A PCIe H100 is its own catalog type. */
	node_env("1");
	setenv("FAKE_NVML_NAME", "NVIDIA H100 PCIe", 1);
	g = open_nvml();
	assert_int_equal(cnl_gpus_list(g, &d), 1);
	assert_string_equal(d[0].type, "H100-80GB-PCIE");
	cnl_gpus_close(g);
}

static void test_nvml_refusals(void **state)
{
	node_env("2");
	setenv("FAKE_NVML_NAME", "NVIDIA GeForce RTX 4090", 1);
	open_fails("nvml:" FAKE_NVML, -CNL_EGPUTYPE,
	           "(\"NVIDIA GeForce RTX 4090\") matches no catalog type");
	open_fails("nvml:/nonexistent/libnvidia-ml.so.1", -EIO,
	           "cannot load /nonexistent/libnvidia-ml.so.1");
}

static void test_nvml_health(void **state)
{
	const struct cnl_gpu_dev *d;
	struct cnl_gpus *g;

	node_env("2");
	g = open_nvml();
	setenv("FAKE_NVML_LOST", "1", 1);
	assert_int_equal(cnl_gpus_list(g, &d), 2);
	assert_true(d[0].healthy);
	assert_false(d[1].healthy);
	unsetenv("FAKE_NVML_LOST");
	assert_int_equal(cnl_gpus_list(g, &d), 2);
	assert_true(d[1].healthy);
	cnl_gpus_close(g);
}

/* Telemetry for /metrics' DCGM families: each field from its NVML call,
 * GPU by GPU; none of utilization on a GPU in MIG mode, nor of what NVML
 * cannot read on a lost GPU; a fake pool gives only its memory size. */
static void test_nvml_telemetry(void **state)
{
	static const char *const vars[] = {
	    "FAKE_NVML_UTIL", "FAKE_NVML_MEM_UTIL", "FAKE_NVML_TEMP",
	    "FAKE_NVML_POWER_MW", "FAKE_NVML_SM_CLOCK"};
	struct cnl_gpu_telemetry t;
	struct cnl_gpus *g;
	char uuid[CNL_GPU_UUID_MAX];

	node_env("2");
	setenv("FAKE_NVML_UTIL", "12,34", 1);
	setenv("FAKE_NVML_MEM_UTIL", "5,6", 1);
	setenv("FAKE_NVML_TEMP", "50,61", 1);
	setenv("FAKE_NVML_POWER_MW", "123456,700000", 1);
	setenv("FAKE_NVML_SM_CLOCK", "1500,1980", 1);
	g = open_nvml();
	assert_int_equal(cnl_gpus_telemetry(g, 1, &t), 0);
	assert_int_equal(t.util_pct, 34);
	assert_int_equal(t.mem_util_pct, 6);
	assert_int_equal(t.temp_c, 61);
	assert_int_equal(t.power_mw, 700000);
	assert_int_equal(t.sm_clock_mhz, 1980);
	assert_int_equal(t.fb_total_mib, 81559);
	assert_int_equal(t.fb_used_mib, 0);
	assert_int_equal(t.fb_free_mib, 81559);
	assert_int_equal(cnl_gpus_telemetry(g, 0, &t), 0);
	assert_int_equal(t.util_pct, 12);
	assert_int_equal(t.power_mw, 123456);
	assert_int_equal(cnl_gpus_telemetry(g, 2, &t), -EINVAL);
	assert_int_equal(cnl_gpus_telemetry(g, -1, &t), -EINVAL);
	/* MIG mode on GPU 0: no utilization there, the rest still read. */
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, uuid), 0);
	assert_int_equal(cnl_gpus_telemetry(g, 0, &t), 0);
	assert_int_equal(t.util_pct, -1);
	assert_int_equal(t.mem_util_pct, -1);
	assert_int_equal(t.temp_c, 50);
	assert_int_equal(cnl_gpus_telemetry(g, 1, &t), 0);
	assert_int_equal(t.util_pct, 34);
	assert_int_equal(cnl_gpus_mig_destroy(g, uuid), 0);
	/* Lost: nothing NVML would read, the size from the listing. */
	setenv("FAKE_NVML_LOST", "1", 1);
	assert_int_equal(cnl_gpus_telemetry(g, 1, &t), 0);
	assert_int_equal(t.util_pct, -1);
	assert_int_equal(t.temp_c, -1);
	assert_int_equal(t.power_mw, -1);
	assert_int_equal(t.sm_clock_mhz, -1);
	assert_int_equal(t.fb_used_mib, -1);
	assert_int_equal(t.fb_total_mib, 81559);
	unsetenv("FAKE_NVML_LOST");
	cnl_gpus_close(g);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);

	/* The fake pool knows only its memory size. */
	g = open_ok("fake:2xH100-80GB-SXM");
	assert_int_equal(cnl_gpus_telemetry(g, 1, &t), 0);
	assert_int_equal(
	    t.fb_total_mib,
	    cat.types[cnl_catalog_find(&cat, "H100-80GB-SXM")].vram_mib);
	assert_int_equal(t.util_pct, -1);
	assert_int_equal(t.fb_used_mib, -1);
	assert_int_equal(t.temp_c, -1);
	cnl_gpus_close(g);
}

static void test_nvml_mig(void **state)
{
	char u[CNL_GPU_UUID_MAX], v[CNL_GPU_UUID_MAX], w[CNL_GPU_UUID_MAX];
	struct cnl_gpus *g;

	node_env("2");
	g = open_nvml();
	/* MIG mode goes on at the first instance. */
	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.40gb", 0, u), 0);
	assert_memory_equal(u, "MIG-", 4);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 1);
	assert_int_equal(cnl_gpus_mig_count(g, 0), 0);
	/* The same profile at the same start: taken. */
	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.40gb", 0, v), -CNL_EDUP);
	/* Overlapping memory slices: refused by the driver. */
	assert_int_equal(cnl_gpus_mig_create(g, 1, "1g.10gb", 2, v),
	                 -CNL_ENOSPACE);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "4g.40gb", 0, v),
	                 -CNL_ENOSPACE);
	/* Not a placement of 2g.20gb. */
	assert_int_equal(cnl_gpus_mig_create(g, 1, "2g.20gb", 1, v), -EINVAL);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.40gb", 4, v), 0);
	assert_memory_equal(v, "MIG-", 4);
	assert_string_not_equal(u, v);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 2);
	/* The full GPU is taken now. */
	assert_int_equal(cnl_gpus_mig_create(g, 1, "1g.10gb", 6, w),
	                 -CNL_ENOSPACE);
	/* Destroy frees the slices. */
	assert_int_equal(cnl_gpus_mig_destroy(g, u), 0);
	assert_int_equal(cnl_gpus_mig_destroy(g, u), -CNL_ENOTFOUND);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 1);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "1g.10gb", 2, w), 0);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "2g.20gb", 0, u), 0);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 3);
	assert_int_equal(cnl_gpus_mig_destroy(g, w), 0);
	assert_int_equal(cnl_gpus_mig_destroy(g, u), 0);
	assert_int_equal(cnl_gpus_mig_destroy(g, v), 0);
	assert_int_equal(cnl_gpus_mig_count(g, 1), 0);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "7g.80gb", 0, u), 0);
	assert_int_equal(cnl_gpus_mig_destroy(g, u), 0);

	/* Unknown profile, GPU out of range, unknown UUID. */
	assert_int_equal(cnl_gpus_mig_create(g, 0, "5g.50gb", 0, u),
	                 -CNL_ENOMIG);
	assert_int_equal(cnl_gpus_mig_create(g, 2, "1g.10gb", 0, u),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_gpus_mig_destroy(g, "MIG-nonesuch"),
	                 -CNL_ENOTFOUND);
	cnl_gpus_close(g);
}

/* The variants that share a slice count map by memory and media. */
static void test_nvml_mig_variants(void **state)
{
	char u[CNL_GPU_UUID_MAX], v[CNL_GPU_UUID_MAX];
	struct cnl_gpus *g;

	node_env("1");
	g = open_nvml();
	/* 1g.20gb takes two memory slices: a 1g.10gb at 1 overlaps it. */
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.20gb", 0, u), 0);
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 1, v),
	                 -CNL_ENOSPACE);
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 2, v), 0);
	/* 1g.20gb starts on even memory slices only. */
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.20gb", 3, v), -EINVAL);
	/* +me: one per GPU, so the second is refused. */
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb+me", 4, v), 0);
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb+me", 5, v),
	                 -CNL_ENOSPACE);
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 5, v), 0);
	assert_int_equal(cnl_gpus_mig_count(g, 0), 4);
	cnl_gpus_close(g);
}

static void test_nvml_mig_mode(void **state)
{
	char path[] = "/tmp/cnl-fake-gpu-XXXXXX", u[CNL_GPU_UUID_MAX];
	struct fake_gpu *fg;
	struct cnl_gpus *g;
	int fd;

	/* No MIG on the GPU. */
	node_env("1");
	setenv("FAKE_NVML_MIG", "0", 1);
	g = open_nvml();
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u),
	                 -CNL_ENOMIG);
	assert_int_equal(cnl_gpus_mig_count(g, 0), 0);
	cnl_gpus_close(g);

	/* The switch stays pending until a GPU reset. */
	node_env("1");
	setenv("FAKE_NVML_MIG_RESET", "1", 1);
	g = open_nvml();
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u), -EAGAIN);
	cnl_gpus_close(g);

	/* A process on GPU 0: its MIG mode is left off; GPU 1 is free. */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, sizeof(*fg)), 0);
	fg = mmap(NULL, sizeof(*fg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(fg != MAP_FAILED);
	close(fd);
	atomic_store(&fg->procs[0].pid, (int32_t)getpid());
	atomic_store(&fg->procs[0].used, 1 << 20);
	node_env("2");
	setenv("CNL_FAKE_GPU", path, 1);
	g = open_nvml();
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u), -EBUSY);
	assert_int_equal(cnl_gpus_mig_create(g, 1, "1g.10gb", 0, u), 0);
	/* Once the process is gone, GPU 0 switches. */
	atomic_store(&fg->procs[0].pid, 0);
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u), 0);
	cnl_gpus_close(g);
	munmap(fg, sizeof(*fg));
	unlink(path);
	unsetenv("CNL_FAKE_GPU");
}

/* ---- device names ------------------------------------------------------- */

static void expect_type(const char *name, uint64_t mib, const char *type)
{
	int t = cnl_gpus_type_from_name(&cat, name, mib);

	if (!type) {
		if (t >= 0)
			fail_msg("\"%s\" mapped to %s", name,
			         cat.types[t].name);
		return;
	}
	if (t < 0 || strcmp(cat.types[t].name, type) != 0)
		fail_msg("\"%s\": got %s, want %s", name,
		         t < 0 ? "none" : cat.types[t].name, type);
}

static void test_type_from_name(void **state)
{
	expect_type("NVIDIA H100 80GB HBM3", 81559, "H100-80GB-SXM");
	expect_type("NVIDIA H100 PCIe", 81559, "H100-80GB-PCIE");
	expect_type("NVIDIA H200", 143771, "H200-141GB");
	expect_type("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB");
	expect_type("NVIDIA A100-PCIE-40GB", 40960, "A100-40GB");
	expect_type("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB");
	expect_type("NVIDIA A100 80GB PCIe", 81920, "A100-80GB");
	/* An A100 whose name does not say 80GB: told by its memory. */
	expect_type("NVIDIA A100-SXM", 81920, "A100-80GB");
	expect_type("NVIDIA L40S", 46068, "L40S");
	expect_type("NVIDIA L4", 23034, "L4");
	expect_type("NVIDIA A10", 23028, "A10");
	expect_type("Tesla T4", 15360, "T4");
	expect_type("Tesla V100-SXM2-32GB", 32510, "V100-32GB");
	expect_type("Tesla V100-PCIE-16GB", 16160, "V100-16GB");
	expect_type("NVIDIA RTX 6000 Ada Generation", 49140, "RTX-6000-Ada");
	expect_type("NVIDIA GeForce RTX 4090", 24564, NULL);
	/* ROCm SMI's names. */
	expect_type("AMD Instinct MI300X", 196592, "MI300X");
	expect_type("Aqua Vanjaram [Instinct MI300X]", 196592, "MI300X");
	expect_type("Aldebaran/MI200 [Instinct MI250X / MI250]", 65520,
	            "MI250");
	expect_type("Instinct MI250X", 65520, "MI250X");
	expect_type("AMD Instinct MI250", 65520, "MI250");
	expect_type("AMD Instinct MI210", 65520, NULL);
}

/* ---- AMD: fake pool and the rocm provider ------------------------------- */

/* A cluster mixes vendors node by node; one node holds one type. */
static void test_fake_amd(void **state)
{
	const struct cnl_gpu_dev *d;
	struct cnl_gpus *g = open_ok("fake:2xMI300X");
	char u[CNL_GPU_UUID_MAX];

	assert_int_equal(cnl_gpus_list(g, &d), 2);
	assert_string_equal(d[1].type, "MI300X");
	assert_int_equal(d[1].mem_mib, 196608);
	assert_string_equal(cnl_gpus_vendor(g), "amd");
	/* No MIG on AMD GPUs. */
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u),
	                 -CNL_ENOMIG);
	cnl_gpus_close(g);
	g = open_ok("fake:4xMI250X");
	assert_string_equal(cnl_gpus_vendor(g), "amd");
	cnl_gpus_close(g);
	g = open_ok("fake:1xH100-80GB-SXM");
	assert_string_equal(cnl_gpus_vendor(g), "nvidia");
	cnl_gpus_close(g);
	open_fails("fake:1xMI300X,1xH100-80GB-SXM", -CNL_ECONFIG,
	           "one GPU type per node (MI300X and H100-80GB-SXM");
}

#ifdef FAKE_ROCM
static void rsmi_env(const char *n, const char *name, const char *subsys)
{
	static const char *const vars[] = {
	    "FAKE_RSMI_GPUS",    "FAKE_RSMI_NAME", "FAKE_RSMI_SUBSYS",
	    "FAKE_RSMI_MEM_MIB", "FAKE_RSMI_LOST", "FAKE_RSMI_NO_DRIVER"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("FAKE_RSMI_GPUS", n, 1);
	if (name)
		setenv("FAKE_RSMI_NAME", name, 1);
	if (subsys)
		setenv("FAKE_RSMI_SUBSYS", subsys, 1);
}

/* ROCm SMI's telemetry into the DCGM fields: busy percents, VRAM use,
 * the edge temperature (millidegrees to degrees), average power
 * (microwatts to milliwatts); no SM clock. */
static void test_rocm_telemetry(void **state)
{
	struct cnl_gpu_telemetry t;
	struct cnl_gpus *g;

	rsmi_env("2", NULL, NULL);
	setenv("FAKE_RSMI_BUSY", "7,88", 1);
	setenv("FAKE_RSMI_VRAM_USED_MIB", "0,4096", 1);
	setenv("FAKE_RSMI_TEMP_MC", "40000,71500", 1);
	setenv("FAKE_RSMI_POWER_UW", "1,612345678", 1);
	g = open_ok("rocm:" FAKE_ROCM);
	assert_int_equal(cnl_gpus_telemetry(g, 1, &t), 0);
	assert_int_equal(t.util_pct, 88);
	assert_int_equal(t.mem_util_pct, 4); /* the fake's 3 + dv */
	assert_int_equal(t.fb_total_mib, 196592);
	assert_int_equal(t.fb_used_mib, 4096);
	assert_int_equal(t.fb_free_mib, 196592 - 4096);
	assert_int_equal(t.temp_c, 71);
	assert_int_equal(t.power_mw, 612345);
	assert_int_equal(t.sm_clock_mhz, -1);
	assert_int_equal(cnl_gpus_telemetry(g, 0, &t), 0);
	assert_int_equal(t.util_pct, 7);
	assert_int_equal(t.temp_c, 40);
	cnl_gpus_close(g);
	unsetenv("FAKE_RSMI_BUSY");
	unsetenv("FAKE_RSMI_VRAM_USED_MIB");
	unsetenv("FAKE_RSMI_TEMP_MC");
	unsetenv("FAKE_RSMI_POWER_UW");
}

static void test_rocm_list(void **state)
{
	const struct cnl_gpu_dev *d;
	struct cnl_gpus *g;
	char u[CNL_GPU_UUID_MAX];

	rsmi_env("8", NULL, NULL);
	g = open_ok("rocm:" FAKE_ROCM);
	assert_string_equal(cnl_gpus_kind(g), "rocm");
	assert_string_equal(cnl_gpus_vendor(g), "amd");
	assert_int_equal(cnl_gpus_list(g, &d), 8);
	assert_string_equal(d[0].type, "MI300X");
	assert_int_equal(d[7].index, 7);
	assert_int_equal(d[0].mem_mib, 196592);
	assert_string_equal(d[0].uuid, "GPU-1a2b3c4d00000000");
	assert_string_equal(d[7].uuid, "GPU-1a2b3c4d00000007");
	assert_true(d[3].healthy);
	/* The fake's PCI addresses are not in /sys: no render node. */
	assert_string_equal(d[0].node, "");
	assert_int_equal(cnl_gpus_mig_create(g, 0, "1g.10gb", 0, u),
	                 -CNL_ENOMIG);
	assert_int_equal(cnl_gpus_mig_count(g, 0), 0);
	cnl_gpus_close(g);

	/* MI250X and MI250 share a device name; the board tells. */
	rsmi_env("2", "Aldebaran/MI200 [Instinct MI250X / MI250]", NULL);
	setenv("FAKE_RSMI_MEM_MIB", "65520", 1);
	g = open_ok("rocm:" FAKE_ROCM);
	assert_int_equal(cnl_gpus_list(g, &d), 2);
	assert_string_equal(d[1].type, "MI250");
	cnl_gpus_close(g);
	rsmi_env("2", "Aldebaran/MI200 [Instinct MI250X / MI250]",
	         "Instinct MI250X");
	g = open_ok("rocm:" FAKE_ROCM);
	assert_int_equal(cnl_gpus_list(g, &d), 2);
	assert_string_equal(d[1].type, "MI250X");
	cnl_gpus_close(g);
}

static void test_rocm_refusals(void **state)
{
	rsmi_env("1", "AMD Instinct MI210", NULL);
	open_fails("rocm:" FAKE_ROCM, -CNL_EGPUTYPE,
	           "GPU 0 (\"AMD Instinct MI210\") matches no catalog type");
	rsmi_env("1", NULL, NULL);
	setenv("FAKE_RSMI_NO_DRIVER", "1", 1);
	open_fails("rocm:" FAKE_ROCM, -EIO, "rsmi_init failed");
	rsmi_env("17", NULL, NULL);
	open_fails("rocm:" FAKE_ROCM, -EIO, "more than 16");
	open_fails("rocm:/nonexistent/librocm_smi64.so.1", -EIO,
	           "cannot load /nonexistent/librocm_smi64.so.1");
	/* Not a ROCm SMI library. */
	open_fails("rocm:" FAKE_NVML, -EIO, "lacks rsmi_init");
}

static void test_rocm_health(void **state)
{
	const struct cnl_gpu_dev *d;
	struct cnl_gpus *g;

	rsmi_env("2", NULL, NULL);
	setenv("FAKE_RSMI_LOST", "1", 1);
	g = open_ok("rocm:" FAKE_ROCM);
	assert_int_equal(cnl_gpus_list(g, &d), 2);
	assert_true(d[0].healthy);
	assert_false(d[1].healthy);
	/* Listed with its catalog memory while it does not answer. */
	assert_int_equal(d[1].mem_mib, 196608);
	cnl_gpus_close(g);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fake_spec),
	    cmocka_unit_test(test_fake_mig),
	    cmocka_unit_test(test_nvml_list),
	    cmocka_unit_test(test_nvml_refusals),
	    cmocka_unit_test(test_nvml_health),
	    cmocka_unit_test(test_nvml_telemetry),
	    cmocka_unit_test(test_nvml_mig),
	    cmocka_unit_test(test_nvml_mig_variants),
	    cmocka_unit_test(test_nvml_mig_mode),
	    cmocka_unit_test(test_type_from_name),
	    cmocka_unit_test(test_fake_amd),
#ifdef FAKE_ROCM
	    cmocka_unit_test(test_rocm_list),
	    cmocka_unit_test(test_rocm_refusals),
	    cmocka_unit_test(test_rocm_health),
	    cmocka_unit_test(test_rocm_telemetry),
#endif
	};

	cnl_catalog_init(&cat);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
