/*
 * throttle.c - compute share: a slice of N blocks gets N% of the GPU's time.
 *
 * Measurement.  The shim measures kernel busy time itself, so it works
 * where NVML has no per-process utilisation (inside MIG instances): every
 * throttled launch is bracketed by two events on its stream, and once the
 * second has completed, the elapsed time between them is GPU time spent on
 * that launch.  Brackets wait in a per-thread ring (no lock) and are
 * harvested, oldest first, at the next launch or synchronisation.  A full
 * ring waits for its oldest bracket, which bounds how far a process can run
 * ahead of the time it has been charged for.  Harvesting waits for a batch
 * of HARVEST_BATCH brackets, and an empty bucket harvests at once.
 *
 * Enforcement.  All processes of the slice share one token bucket in the
 * region, filled at the slice's rate in nanoseconds of GPU time per
 * nanosecond of wall time and charged with the measured busy time.  A launch
 * finding the bucket empty sleeps until it would have refilled.  The rate
 * is the share, or with a GPU board (region.h) the share scaled up by the
 * idle shares of the other slices on the GPU.
 *
 * Hot path of an unthrottled slice: one load and one branch.  Of a
 * throttled one: a vDSO clock read, a few atomics on the region, two event
 * records and one event query; no system call, lock or NVML call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>

#include "shim/guard.h"
#include "shim/shim-internal.h"

#define RING          16
#define HARVEST_BATCH 4

typedef CUresult (*ev_create_fn)(CUevent *, unsigned int);
typedef CUresult (*ev_destroy_fn)(CUevent);
typedef CUresult (*ev_record_fn)(CUevent, CUstream);
typedef CUresult (*ev_query_fn)(CUevent);
typedef CUresult (*ev_elapsed_fn)(float *, CUevent, CUevent);

static struct {
	ev_create_fn create;
	ev_destroy_fn destroy;
	ev_record_fn record;
	ev_query_fn query;
	ev_query_fn sync;
	ev_elapsed_fn elapsed;
	_Atomic int state; /* 0 unresolved, 1 ready, -1 unavailable */
} ev;

struct bracket {
	CUevent start, end;
};

struct ring {
	struct bracket b[RING];
	unsigned head, tail; /* pending: [tail, head) */
	CUevent spare[2 * RING];
	unsigned nspare;
};

static __thread struct ring ring;

static int events_ready(void)
{
	int s = atomic_load_explicit(&ev.state, memory_order_acquire);

	if (s)
		return s > 0;
	ev.create = (ev_create_fn)cnl_real_sym(CNL_LIB_CU, "cuEventCreate");
	ev.destroy =
	    (ev_destroy_fn)cnl_real_sym(CNL_LIB_CU, "cuEventDestroy_v2");
	ev.record = (ev_record_fn)cnl_real_sym(CNL_LIB_CU, "cuEventRecord");
	ev.query = (ev_query_fn)cnl_real_sym(CNL_LIB_CU, "cuEventQuery");
	ev.sync = (ev_query_fn)cnl_real_sym(CNL_LIB_CU, "cuEventSynchronize");
	/* CUDA 13 renamed it; the old entry point stays for old programs. */
	ev.elapsed =
	    (ev_elapsed_fn)cnl_real_sym(CNL_LIB_CU, "cuEventElapsedTime_v2");
	if (!ev.elapsed)
		ev.elapsed = (ev_elapsed_fn)cnl_real_sym(CNL_LIB_CU,
		                                         "cuEventElapsedTime");
	s = ev.create && ev.destroy && ev.record && ev.query && ev.sync &&
	            ev.elapsed
	        ? 1
	        : -1;
	atomic_store_explicit(&ev.state, s, memory_order_release);
	return s > 0;
}

int cnl_throttle_active(void)
{
	unsigned pct;

	cnl_shim_init();
	if (cnl_shim.mode != CNL_MODE_ON)
		return 0;
	pct =
	    atomic_load_explicit(&cnl_shim.r->share_pct, memory_order_relaxed);
	return pct > 0 && pct < 100;
}

static unsigned rate(uint64_t now)
{
	return cnl_guard_rate(cnl_shim.r, cnl_shim.board, now);
}

static CUevent take_event(void)
{
	CUevent e = NULL;

	if (ring.nspare)
		return ring.spare[--ring.nspare];
	if (ev.create(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
		return NULL;
	return e;
}

static void give_event(CUevent e)
{
	if (!e)
		return;
	if (ring.nspare < 2 * RING)
		ring.spare[ring.nspare++] = e;
	else
		ev.destroy(e);
}

static void charge(uint64_t ns)
{
	struct cnl_region *r = cnl_shim.r;

	if (cnl_shim.slot < 0) /* detached at exit */
		return;
	atomic_fetch_add_explicit(&r->procs[cnl_shim.slot].busy_ns, ns,
	                          memory_order_relaxed);
	cnl_bucket_charge(
	    &r->bucket, (int64_t)ns,
	    atomic_load_explicit(&r->burst_ns, memory_order_relaxed));
}

void cnl_throttle_harvest(int wait_all)
{
	if (cnl_shim.mode != CNL_MODE_ON || ring.head == ring.tail)
		return;
	while (ring.tail != ring.head) {
		struct bracket *b = &ring.b[ring.tail % RING];
		CUresult rc = wait_all ? ev.sync(b->end) : ev.query(b->end);
		float ms = 0;

		if (rc == CUDA_ERROR_NOT_READY)
			break;
		if (rc == CUDA_SUCCESS &&
		    ev.elapsed(&ms, b->start, b->end) == CUDA_SUCCESS && ms > 0)
			charge((uint64_t)((double)ms * 1e6));
		give_event(b->start);
		give_event(b->end);
		ring.tail++;
	}
}

/* Wait for the oldest bracket: the ring is full. */
static void harvest_oldest(void)
{
	struct bracket *b = &ring.b[ring.tail % RING];

	ev.sync(b->end);
	cnl_throttle_harvest(0);
}

void cnl_throttle_before(void)
{
	struct cnl_region *r = cnl_shim.r;
	uint64_t t0 = 0;

	for (;;) {
		uint64_t now = cnl_now_ns();
		unsigned pct = rate(now);
		uint64_t burst =
		    atomic_load_explicit(&r->burst_ns, memory_order_relaxed);
		int64_t tokens;
		struct timespec ts;
		uint64_t wait;

		if (pct >= 100 && cnl_shim.board < 0)
			break;
		cnl_bucket_refill(&r->bucket, now, pct ? pct : 1, burst);
		tokens = atomic_load_explicit(&r->bucket.tokens,
		                              memory_order_relaxed);
		if (tokens > 0)
			break;
		if (!t0)
			t0 = now;
		/* Our own finished work may be what is owed: collect it. */
		cnl_throttle_harvest(0);
		wait = (uint64_t)(-tokens) * 100 / (pct ? pct : 1);
		wait = wait < 20000 ? 20000 : wait > 5000000 ? 5000000 : wait;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)wait;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (t0 && cnl_shim.slot >= 0)
		atomic_fetch_add_explicit(&r->procs[cnl_shim.slot].throttle_ns,
		                          cnl_now_ns() - t0,
		                          memory_order_relaxed);
}

/* Per-thread default stream launches are bracketed on that stream. */
static CUstream bracket_stream(CUstream s, int ptds)
{
	return ptds && !s ? CU_STREAM_PER_THREAD : s;
}

void cnl_throttle_measure_begin(CUstream s, int ptds, void **ret_ctx)
{
	struct bracket *b;

	*ret_ctx = NULL;
	if (!events_ready())
		return;
	/* Harvest in batches: fewer queries of brackets still running. */
	if (ring.head - ring.tail >= HARVEST_BATCH)
		cnl_throttle_harvest(0);
	if (ring.head - ring.tail >= RING)
		harvest_oldest();
	b = &ring.b[ring.head % RING];
	b->start = take_event();
	b->end = take_event();
	if (!b->start || !b->end ||
	    ev.record(b->start, bracket_stream(s, ptds)) != CUDA_SUCCESS) {
		/* Events in another context, or none left: unmeasured. */
		if (b->start)
			ev.destroy(b->start);
		if (b->end)
			ev.destroy(b->end);
		return;
	}
	*ret_ctx = b;
}

void cnl_throttle_measure_end(void *ctx, CUstream s, int ptds, CUresult rc)
{
	struct bracket *b = ctx;

	atomic_fetch_add_explicit(&cnl_shim.r->procs[cnl_shim.slot].launches, 1,
	                          memory_order_relaxed);
	if (!b)
		return;
	if (rc != CUDA_SUCCESS ||
	    ev.record(b->end, bracket_stream(s, ptds)) != CUDA_SUCCESS) {
		give_event(b->start);
		give_event(b->end);
		return;
	}
	ring.head++;
}

/* Launch wrappers -------------------------------------------------------- */

#define THROTTLED(real, stream, ptds, call)                      \
	do {                                                     \
		void *m_;                                        \
		CUresult rc_;                                    \
		if (!(real))                                     \
			return CUDA_ERROR_NOT_INITIALIZED;       \
		if (!cnl_throttle_active())                      \
			return call;                             \
		cnl_throttle_before();                           \
		cnl_throttle_measure_begin(stream, ptds, &m_);   \
		rc_ = call;                                      \
		cnl_throttle_measure_end(m_, stream, ptds, rc_); \
		return rc_;                                      \
	} while (0)

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                        unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes,
                        CUstream hStream, void **kernelParams, void **extra)
{
	cnl_real_cuLaunchKernel_t real = CNL_REAL(cuLaunchKernel);

	THROTTLED(real, hStream, 0,
	          real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
	               blockDimZ, sharedMemBytes, hStream, kernelParams,
	               extra));
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                             unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream,
                             void **kernelParams, void **extra)
{
	cnl_real_cuLaunchKernel_ptsz_t real = CNL_REAL(cuLaunchKernel_ptsz);

	THROTTLED(real, hStream, 1,
	          real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
	               blockDimZ, sharedMemBytes, hStream, kernelParams,
	               extra));
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                          void **kernelParams, void **extra)
{
	cnl_real_cuLaunchKernelEx_t real = CNL_REAL(cuLaunchKernelEx);
	CUstream s = config ? config->hStream : NULL;

	THROTTLED(real, s, 0, real(config, f, kernelParams, extra));
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                               void **kernelParams, void **extra)
{
	cnl_real_cuLaunchKernelEx_ptsz_t real = CNL_REAL(cuLaunchKernelEx_ptsz);
	CUstream s = config ? config->hStream : NULL;

	THROTTLED(real, s, 1, real(config, f, kernelParams, extra));
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                   unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX,
                                   unsigned int blockDimY,
                                   unsigned int blockDimZ,
                                   unsigned int sharedMemBytes,
                                   CUstream hStream, void **kernelParams)
{
	cnl_real_cuLaunchCooperativeKernel_t real =
	    CNL_REAL(cuLaunchCooperativeKernel);

	THROTTLED(real, hStream, 0,
	          real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
	               blockDimZ, sharedMemBytes, hStream, kernelParams));
}

CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void **kernelParams)
{
	cnl_real_cuLaunchCooperativeKernel_ptsz_t real =
	    CNL_REAL(cuLaunchCooperativeKernel_ptsz);

	THROTTLED(real, hStream, 1,
	          real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
	               blockDimZ, sharedMemBytes, hStream, kernelParams));
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	cnl_real_cuGraphLaunch_t real = CNL_REAL(cuGraphLaunch);

	THROTTLED(real, hStream, 0, real(hGraphExec, hStream));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	cnl_real_cuGraphLaunch_ptsz_t real = CNL_REAL(cuGraphLaunch_ptsz);

	THROTTLED(real, hStream, 1, real(hGraphExec, hStream));
}

/* The launches of CUDA < 4.0: on the legacy default stream, or hStream. */

CUresult cuLaunch(CUfunction f)
{
	cnl_real_cuLaunch_t real = CNL_REAL(cuLaunch);

	THROTTLED(real, NULL, 0, real(f));
}

CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	cnl_real_cuLaunchGrid_t real = CNL_REAL(cuLaunchGrid);

	THROTTLED(real, NULL, 0, real(f, grid_width, grid_height));
}

CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height,
                           CUstream hStream)
{
	cnl_real_cuLaunchGridAsync_t real = CNL_REAL(cuLaunchGridAsync);

	THROTTLED(real, hStream, 0, real(f, grid_width, grid_height, hStream));
}

/* One launch on several devices' streams at once cannot be bracketed on
 * one stream: refused while a share is enforced (deprecated since 11.3;
 * cuLaunchCooperativeKernel per device is the replacement). */
CUresult
cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                     unsigned int numDevices,
                                     unsigned int flags)
{
	cnl_real_cuLaunchCooperativeKernelMultiDevice_t real =
	    CNL_REAL(cuLaunchCooperativeKernelMultiDevice);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (cnl_throttle_active()) {
		cnl_log_once(CNL_LOG_ESCAPE,
		             "cuLaunchCooperativeKernelMultiDevice refused: "
		             "the slice's compute share is enforced");
		return CUDA_ERROR_NOT_PERMITTED;
	}
	return real(launchParamsList, numDevices, flags);
}
