/*
 * hiptest.c - a plain HIP runtime API program that the HIP shim's tests
 * (test_hip_preload.c, test_hip_share.c) run with libcnlab-hip.so
 * preloaded over the fake runtime (tests/fakes/fake_hip.c).
 *
 *   hiptest repl          prints "ready", then answers one line per command:
 *     alloc PATH BYTES      PATH malloc|managed|ext|pitch|mempitch|3d|
 *                           array|3darray|darray|darray3d|async|pool|vmm|
 *                           vmm-host; "ok ID" or "fail RC"
 *     dl HOW BYTES          hipMalloc found by dlsym (HOW default|handle|
 *                           next) or hipGetProcAddress (procaddr);
 *                           "ok ID" or "fail RC"
 *     free ID               the matching free; "ok" or "fail RC"
 *     info                  hipMemGetInfo: "FREE TOTAL" (or "fail RC")
 *     total                 hipDeviceTotalMem
 *     used                  device memory the fake runtime counts for us
 *     sync                  hipDeviceSynchronize; "ok"
 *     ipc-export ID FILE    write ID's IPC handle to FILE; "ok"/"fail RC"
 *     ipc-open FILE         open the handle in FILE; "ok" or "fail RC"
 *     close-fds N           close every descriptor above stdio but the
 *                           conversation's (N = 1: closefrom, else a loop
 *                           of close); "ok"
 *     ns HOW BYTES LIB      load LIB into a new link-map namespace through
 *                           HOW (direct|default|next|libc: dlmopen called,
 *                           or found by dlsym) or with dlopen (dlopen), and
 *                           allocate BYTES through its cnl_escape_hip_alloc;
 *                           "refused" (not loaded), "ok" or "fail RC"
 *     door NAME             call an entry point the shim refuses inside a
 *                           slice, with valid arguments (NAME import-vmm|
 *                           import-pool|import-ptr|import-ext|mipmap|
 *                           mipmap-create|launch-ptr|launch-coop-multi|
 *                           launch-ext-multi); "ok" or "fail RC"
 *   hiptest greedy MODE US SECONDS
 *                         launch US-microsecond kernels through MODE
 *                         kernel|spt|ext|module|extmodule|extmodulecxx|
 *                         hccmodule|coop|coopspt|graph|graphspt, four in
 *                         flight; prints "ready"
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

/* The fake's own count; not in the HIP API (absent on a real GPU). */
uint64_t cnlfake_hip_used(void) __attribute__((weak));
/* Declared by the C++-only hip_ext.h, or by HIP 6 only; weak, so that
 * hiptest links against a real runtime without them too (tests/gpu). */
hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy,
                                    uint32_t gz, uint32_t lx, uint32_t ly,
                                    uint32_t lz, size_t shm, hipStream_t stream,
                                    void **params, void **extra,
                                    hipEvent_t start, hipEvent_t stop,
                                    uint32_t flags) __attribute__((weak));
hipError_t hipGraphLaunch_spt(hipGraphExec_t exec, hipStream_t stream)
    __attribute__((weak));
#if HIP_VERSION < 60200000
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version,
                             uint64_t flags, int *status) __attribute__((weak));
#endif
/* What a C++ program calls for hip_ext.h's launches: their C++ names. */
hipError_t
_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j(
    hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
    uint32_t ly, uint32_t lz, size_t shm, hipStream_t stream, void **params,
    void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags);
hipError_t
_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_(
    hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
    uint32_t ly, uint32_t lz, size_t shm, hipStream_t stream, void **params,
    void **extra, hipEvent_t start, hipEvent_t stop);

#define MAXOBJ 4096

enum kind { K_PTR = 1, K_ASYNC, K_ARRAY, K_VMM, K_DARRAY };

static struct {
	int kind;
	void *p;
} objs[MAXOBJ];
static int nobjs;
static hipMemPool_t pool;

static int add(int kind, void *p)
{
	if (nobjs >= MAXOBJ)
		return -1;
	objs[nobjs].kind = kind;
	objs[nobjs].p = p;
	return nobjs++;
}

static hipError_t do_alloc(const char *path, size_t n, int *ret_id)
{
	hipChannelFormatDesc desc = {32, 0, 0, 0, hipChannelFormatKindFloat};
	hipError_t rc = hipErrorInvalidValue;
	void *p = NULL;
	int kind = K_PTR;

	if (strcmp(path, "malloc") == 0) {
		rc = hipMalloc(&p, n);
	} else if (strcmp(path, "managed") == 0) {
		rc = hipMallocManaged(&p, n, hipMemAttachGlobal);
	} else if (strcmp(path, "ext") == 0) {
		rc = hipExtMallocWithFlags(&p, n, hipDeviceMallocFinegrained);
	} else if (strcmp(path, "pitch") == 0) {
		size_t pitch = 0; /* n bytes as 1000-byte rows */
		rc = hipMallocPitch(&p, &pitch, 1000, n / 1000);
	} else if (strcmp(path, "3d") == 0) {
		hipPitchedPtr pp = {0};
		hipExtent e = {1000, 10, n / 10000};
		rc = hipMalloc3D(&pp, e);
		p = pp.ptr;
	} else if (strcmp(path, "array") == 0) {
		hipArray *a = NULL;
		rc = hipMallocArray(&a, &desc, n / 4 / 256, 256, 0);
		p = a;
		kind = K_ARRAY;
	} else if (strcmp(path, "3darray") == 0) {
		hipArray *a = NULL;
		struct hipExtent e = {n / 4 / 64 / 4, 64, 4};
		rc = hipMalloc3DArray(&a, &desc, e, 0);
		p = a;
		kind = K_ARRAY;
	} else if (strcmp(path, "mempitch") == 0) {
		size_t pitch = 0;
		rc = hipMemAllocPitch(&p, &pitch, 1000, n / 1000, 4);
	} else if (strcmp(path, "darray") == 0) {
		HIP_ARRAY_DESCRIPTOR d = {n / 4 / 256, 256, HIP_AD_FORMAT_FLOAT,
		                          1};
		hipArray *a = NULL;
		rc = hipArrayCreate(&a, &d);
		p = a;
		kind = K_DARRAY;
	} else if (strcmp(path, "darray3d") == 0) {
		HIP_ARRAY3D_DESCRIPTOR d = {n / 4 / 64 / 4,      64, 4,
		                            HIP_AD_FORMAT_FLOAT, 1,  0};
		hipArray *a = NULL;
		rc = hipArray3DCreate(&a, &d);
		p = a;
		kind = K_DARRAY;
	} else if (strcmp(path, "async") == 0) {
		rc = hipMallocAsync(&p, n, NULL);
		kind = K_ASYNC;
	} else if (strcmp(path, "pool") == 0) {
		if (!pool) {
			hipMemPoolProps props;
			memset(&props, 0, sizeof(props));
			props.allocType = hipMemAllocationTypePinned;
			props.location.type = hipMemLocationTypeDevice;
			hipMemPoolCreate(&pool, &props);
		}
		rc = hipMallocFromPoolAsync(&p, n, pool, NULL);
		kind = K_ASYNC;
	} else if (strcmp(path, "vmm") == 0 || strcmp(path, "vmm-host") == 0) {
		hipMemAllocationProp prop;
		hipMemGenericAllocationHandle_t h = NULL;
		memset(&prop, 0, sizeof(prop));
		prop.type = hipMemAllocationTypePinned;
		prop.location.type = strcmp(path, "vmm") == 0
		                         ? hipMemLocationTypeDevice
		                         : hipMemLocationTypeInvalid;
		rc = hipMemCreate(&h, n, &prop, 0);
		p = h;
		kind = K_VMM;
	}
	if (rc == hipSuccess)
		*ret_id = add(kind, p);
	return rc;
}

static hipError_t do_free(int id)
{
	hipError_t rc = hipErrorInvalidValue;

	if (id < 0 || id >= nobjs || !objs[id].kind)
		return rc;
	switch (objs[id].kind) {
	case K_PTR:
		rc = hipFree(objs[id].p);
		break;
	case K_ASYNC:
		rc = hipFreeAsync(objs[id].p, NULL);
		break;
	case K_ARRAY:
		rc = hipFreeArray(objs[id].p);
		break;
	case K_VMM:
		rc = hipMemRelease(objs[id].p);
		break;
	case K_DARRAY:
		rc = hipArrayDestroy(objs[id].p);
		break;
	}
	if (rc == hipSuccess)
		objs[id].kind = 0;
	return rc;
}

typedef hipError_t (*malloc_fn)(void **, size_t);

static hipError_t do_dl(const char *how, size_t n, int *ret_id)
{
	malloc_fn f = NULL;
	void *p = NULL;
	hipError_t rc;

	if (strcmp(how, "procaddr") == 0) {
		void *fp = NULL;
		if (hipGetProcAddress &&
		    hipGetProcAddress("hipMalloc", &fp, 60200, 0, NULL) ==
		        hipSuccess)
			f = (malloc_fn)fp;
	} else if (strcmp(how, "default") == 0) {
		f = (malloc_fn)dlsym(RTLD_DEFAULT, "hipMalloc");
	} else if (strcmp(how, "next") == 0) {
		f = (malloc_fn)dlsym(RTLD_NEXT, "hipMalloc");
	} else {
		void *h = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_NOLOAD);
		f = h ? (malloc_fn)dlsym(h, "hipMalloc") : NULL;
	}
	if (!f)
		return hipErrorNotFound;
	rc = f(&p, n);
	if (rc == hipSuccess)
		*ret_id = add(K_PTR, p);
	return rc;
}

typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);
typedef int (*escape_fn)(unsigned long long);

/* A library of the tenant's, loaded beside the program's runtime. */
static void do_ns(const char *how, unsigned long long n, const char *lib)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	dlmopen_fn door = NULL;
	escape_fn f;
	void *h;
	int rc;

	if (strcmp(how, "direct") == 0)
		door = dlmopen;
	else if (strcmp(how, "default") == 0)
		door = (dlmopen_fn)dlsym(RTLD_DEFAULT, "dlmopen");
	else if (strcmp(how, "next") == 0)
		door = (dlmopen_fn)dlsym(RTLD_NEXT, "dlmopen");
	else if (strcmp(how, "libc") == 0 && libc)
		door = (dlmopen_fn)dlsym(libc, "dlmopen");
	if (strcmp(how, "dlopen") == 0)
		h = dlopen(lib, RTLD_NOW);
	else
		h = door ? door(LM_ID_NEWLM, lib, RTLD_NOW) : NULL;
	f = h ? (escape_fn)dlsym(h, "cnl_escape_hip_alloc") : NULL;
	if (!f) {
		printf("refused\n");
		return;
	}
	rc = f(n);
	if (rc == hipSuccess)
		printf("ok\n");
	else
		printf("fail %d\n", rc);
}

/* The entry points the shim refuses inside a slice, called as a program
 * would, with arguments the runtime accepts. */
static hipError_t door(const char *name)
{
	static char kernel;
	hipMemGenericAllocationHandle_t h;
	hipMemPoolPtrExportData data = {{0}};
	hipExternalMemoryHandleDesc ext = {0};
	struct hipChannelFormatDesc desc = {32, 0, 0, 0,
	                                    hipChannelFormatKindFloat};
	HIP_ARRAY3D_DESCRIPTOR d3 = {0};
	hipLaunchParams lp = {0};
	hipMipmappedArray_t arr;
	hipExternalMemory_t mem;
	hipMemPool_t mp;
	void *p;

	if (strcmp(name, "import-vmm") == 0)
		return hipMemImportFromShareableHandle(
		    &h, (void *)(intptr_t)0,
		    hipMemHandleTypePosixFileDescriptor);
	if (strcmp(name, "import-pool") == 0)
		return hipMemPoolImportFromShareableHandle(
		    &mp, (void *)(intptr_t)0,
		    hipMemHandleTypePosixFileDescriptor, 0);
	if (strcmp(name, "import-ptr") == 0)
		return hipMemPoolImportPointer(
		    &p, (hipMemPool_t)(uintptr_t)0x2000, &data);
	if (strcmp(name, "import-ext") == 0) {
		ext.type = hipExternalMemoryHandleTypeOpaqueFd;
		ext.size = 1 << 20;
		return hipImportExternalMemory(&mem, &ext);
	}
	if (strcmp(name, "mipmap") == 0)
		return hipMallocMipmappedArray(
		    &arr, &desc, (struct hipExtent){1024, 1024, 0}, 4, 0);
	if (strcmp(name, "mipmap-create") == 0) {
		d3.Width = d3.Height = 1024;
		d3.Format = HIP_AD_FORMAT_FLOAT;
		d3.NumChannels = 1;
		return hipMipmappedArrayCreate(&arr, &d3, 4);
	}
	if (strcmp(name, "launch-ptr") == 0)
		return hipLaunchByPtr(&kernel);
	lp.func = &kernel;
	lp.gridDim = lp.blockDim = (dim3){1, 1, 1};
	if (strcmp(name, "launch-coop-multi") == 0)
		return hipLaunchCooperativeKernelMultiDevice(&lp, 1, 0);
	if (strcmp(name, "launch-ext-multi") == 0)
		return hipExtLaunchMultiKernelMultiDevice(&lp, 1, 0);
	return hipErrorInvalidValue;
}

static void answer_rc(hipError_t rc, int id)
{
	if (rc == hipSuccess && id >= 0)
		printf("ok %d\n", id);
	else if (rc == hipSuccess)
		printf("ok\n");
	else
		printf("fail %d\n", (int)rc);
}

static int repl(void)
{
	char line[512], a[64], b[400];
	unsigned long long n;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		int id = -1;
		size_t f = 0, t = 0;

		hipError_t rc;

		if (sscanf(line, "alloc %63s %llu", a, &n) == 2) {
			rc = do_alloc(a, (size_t)n, &id);
			answer_rc(rc, id);
		} else if (sscanf(line, "dl %63s %llu", a, &n) == 2) {
			rc = do_dl(a, (size_t)n, &id);
			answer_rc(rc, id);
		} else if (sscanf(line, "free %d", &id) == 1) {
			answer_rc(do_free(id), -1);
		} else if (strncmp(line, "info", 4) == 0) {
			rc = hipMemGetInfo(&f, &t);
			if (rc == hipSuccess)
				printf("%zu %zu\n", f, t);
			else
				printf("fail %d\n", (int)rc);
		} else if (strncmp(line, "total", 5) == 0) {
			rc = hipDeviceTotalMem(&t, 0);
			if (rc == hipSuccess)
				printf("%zu\n", t);
			else
				printf("fail %d\n", (int)rc);
		} else if (strncmp(line, "used", 4) == 0) {
			printf("%llu\n",
			       cnlfake_hip_used
			           ? (unsigned long long)cnlfake_hip_used()
			           : 0ULL);
		} else if (strncmp(line, "sync", 4) == 0) {
			answer_rc(hipDeviceSynchronize(), -1);
		} else if (sscanf(line, "ipc-export %d %399s", &id, b) == 2) {
			hipIpcMemHandle_t h;
			FILE *fp;

			rc = id >= 0 && id < nobjs
			         ? hipIpcGetMemHandle(&h, objs[id].p)
			         : hipErrorInvalidValue;
			if (rc == hipSuccess && (fp = fopen(b, "w"))) {
				fwrite(&h, sizeof(h), 1, fp);
				fclose(fp);
			}
			answer_rc(rc, -1);
		} else if (sscanf(line, "ipc-open %399s", b) == 1) {
			hipIpcMemHandle_t h;
			FILE *fp = fopen(b, "r");
			void *p = NULL;

			rc = hipErrorInvalidValue;
			if (fp && fread(&h, sizeof(h), 1, fp) == 1)
				rc = hipIpcOpenMemHandle(
				    &p, h, hipIpcMemLazyEnablePeerAccess);
			if (fp)
				fclose(fp);
			answer_rc(rc, -1);
		} else if (sscanf(line, "close-fds %d", &id) == 1) {
			/* As a daemonising program does, but the pipes of
			 * this conversation (stdio). */
			if (id == 1)
				closefrom(3);
			else
				for (int fd = 3; fd < 1024; fd++)
					close(fd);
			printf("ok\n");
		} else if (sscanf(line, "ns %63s %llu %399s", a, &n, b) == 3) {
			do_ns(a, n, b);
		} else if (sscanf(line, "door %63s", a) == 1) {
			answer_rc(door(a), -1);
		} else {
			printf("? %s", line);
		}
		fflush(stdout);
	}
	return 0;
}

static double elapsed(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) +
	       (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static int greedy(const char *mode, unsigned us, double seconds)
{
	hipEvent_t inflight[4];
	hipModule_t mod;
	hipFunction_t fn;
	hipStream_t s;
	hipGraph_t g;
	hipGraphExec_t ge;
	dim3 one = {1, 1, 1};
	char name[32];
	struct timespec t0;
	int spt = strstr(mode, "spt") != NULL;

	snprintf(name, sizeof(name), "busy_%u", us);
	if (hipInit(0) != hipSuccess || hipSetDevice(0) != hipSuccess ||
	    hipModuleLoadData(&mod, "fake") != hipSuccess ||
	    hipModuleGetFunction(&fn, mod, name) != hipSuccess ||
	    hipStreamCreate(&s) != hipSuccess ||
	    hipGraphCreate(&g, 0) != hipSuccess ||
	    hipGraphInstantiate(&ge, g, NULL, NULL, 0) != hipSuccess) {
		fprintf(stderr, "hiptest: no HIP device\n");
		return 2;
	}
	for (int i = 0; i < 4; i++)
		hipEventCreate(&inflight[i]);
	printf("ready\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned k = 0;; k++) {
		hipError_t rc;

		if (k >= 4)
			hipEventSynchronize(inflight[k % 4]);
		if (strcmp(mode, "spt") == 0)
			rc = hipLaunchKernel_spt(fn, one, one, NULL, 0, NULL);
		else if (strcmp(mode, "ext") == 0)
			rc = hipExtLaunchKernel(fn, one, one, NULL, 0, s, NULL,
			                        NULL, 0);
		else if (strcmp(mode, "module") == 0)
			rc = hipModuleLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s,
			                           NULL, NULL);
		else if (strcmp(mode, "extmodule") == 0)
			rc =
			    hipExtModuleLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s,
			                             NULL, NULL, NULL, NULL, 0);
		else if (strcmp(mode, "extmodulecxx") == 0)
			rc =
			    _Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j(
			        fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL, NULL,
			        NULL, 0);
		else if (strcmp(mode, "hccmodule") == 0)
			rc =
			    _Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_(
			        fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL, NULL,
			        NULL);
		else if (strcmp(mode, "coop") == 0)
			rc = hipLaunchCooperativeKernel(fn, one, one, NULL, 0,
			                                s);
		else if (strcmp(mode, "coopspt") == 0)
			rc = hipLaunchCooperativeKernel_spt(fn, one, one, NULL,
			                                    0, NULL);
		else if (strcmp(mode, "graph") == 0)
			rc = hipGraphLaunch(ge, s);
		else if (strcmp(mode, "graphspt") == 0)
			rc = hipGraphLaunch_spt(ge, NULL);
		else
			rc = hipLaunchKernel(fn, one, one, NULL, 0, s);
		if (rc != hipSuccess) {
			fprintf(stderr, "hiptest: launch failed: %d\n", rc);
			return 1;
		}
		hipEventRecord(inflight[k % 4], spt ? hipStreamPerThread : s);
		if (elapsed(&t0) > seconds)
			break;
	}
	hipStreamSynchronize(s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "repl") == 0) {
		if (hipInit(0) != hipSuccess || hipSetDevice(0) != hipSuccess) {
			fprintf(stderr, "hiptest: no HIP device\n");
			return 2;
		}
		return repl();
	}
	if (argc >= 5 && strcmp(argv[1], "greedy") == 0)
		return greedy(argv[2], (unsigned)strtoul(argv[3], NULL, 10),
		              strtod(argv[4], NULL));
	fprintf(stderr, "usage: hiptest repl | greedy MODE US SECONDS\n");
	return 2;
}
