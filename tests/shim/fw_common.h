/*
 * fw_common.h - what the framework-shaped programs (fw_torch.c, fw_jax.c)
 * share: CHECK, and what the driver holds for the process, the ground
 * truth they compare with what they are told.
 *
 * Over the fake driver (tests/fakes) that is the fake's own count,
 * cnlfake_used(), found at run time; on a real GPU (tests/gpu/run.sh builds
 * the same programs) it is NVML's figure for the process (the driver's
 * count, which the shim filters but does not change) less what it was at
 * start (the context).  exact_driver is 1 over the fake, where the count is
 * exact and equal to what the shim charges.
 */
#ifndef CNL_TESTS_FW_COMMON_H
#define CNL_TESTS_FW_COMMON_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

#define MiB (1ULL << 20)

static int exact_driver;
static uint64_t (*fake_used)(void);
static long long nvml_base = -1;

typedef struct {
	unsigned pid;
	unsigned long long used;
	unsigned gi, ci;
} fw_proc_info;

/* NVML's figure for this process, or -1 when it does not list it. */
static long long fw_nvml_used(void)
{
	static void *h;
	typedef int (*init_fn)(void);
	typedef int (*handle_fn)(unsigned, void **);
	typedef int (*procs_fn)(void *, unsigned *, fw_proc_info *);
	procs_fn list;
	fw_proc_info infos[64];
	unsigned n = 64;
	void *dev;

	if (!h && (h = dlopen("libnvidia-ml.so.1", RTLD_NOW)))
		((init_fn)dlsym(h, "nvmlInit_v2"))();
	if (!h || !(list = (procs_fn)dlsym(
	                h, "nvmlDeviceGetComputeRunningProcesses_v3")))
		return -1;
	((handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev);
	if (list(dev, &n, infos) != 0)
		return -1;
	for (unsigned i = 0; i < n; i++)
		if (infos[i].pid == (unsigned)getpid())
			return (long long)infos[i].used;
	return -1;
}

/* Call once the context exists. */
static void driver_init(void)
{
	fake_used = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "cnlfake_used");
	exact_driver = fake_used != NULL;
	if (!exact_driver && (nvml_base = fw_nvml_used()) < 0)
		printf("info NVML does not list this process: the driver's "
		       "own count is not checked\n");
}

/* What the driver holds for the process beyond its start; 0 if unknown. */
static uint64_t driver_holds(void)
{
	long long now;

	if (fake_used)
		return fake_used();
	if (nvml_base < 0 || (now = fw_nvml_used()) < nvml_base)
		return 0;
	return (uint64_t)(now - nvml_base);
}

#endif /* CNL_TESTS_FW_COMMON_H */
