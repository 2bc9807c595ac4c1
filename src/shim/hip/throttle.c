/*
 * throttle.c - compute share for HIP programs: the CUDA shim's measurement
 * and token bucket (src/shim/throttle.c), over HIP events.
 *
 * Every launch of a throttled slice is bracketed by two events on its
 * stream (hipEventRecord); once the second has completed, the time between
 * them (hipEventElapsedTime) is GPU time spent on that launch, charged to
 * the slice's token bucket in the region, which all processes of the
 * slice share with CUDA processes of the same slice.  Brackets wait in a
 * per-thread ring (no lock) and are harvested at the next launch or
 * synchronisation; a full ring waits for its oldest.  A launch finding the
 * bucket empty sleeps until it would have refilled.  Launches on the
 * per-thread default stream (the _spt entry points, hipStreamPerThread)
 * are bracketed on that stream.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>

#include "shim/guard.h"
#include "shim/hip/hip-internal.h"

#define RING          16
#define HARVEST_BATCH 4

typedef hipError_t (*ev_create_fn)(hipEvent_t *);
typedef hipError_t (*ev_one_fn)(hipEvent_t);
typedef hipError_t (*ev_record_fn)(hipEvent_t, hipStream_t);
typedef hipError_t (*ev_elapsed_fn)(float *, hipEvent_t, hipEvent_t);

static struct {
	ev_create_fn create;
	ev_one_fn destroy, query, sync;
	ev_record_fn record;
	ev_elapsed_fn elapsed;
	_Atomic int state; /* 0 unresolved, 1 ready, -1 unavailable */
} ev;

struct bracket {
	hipEvent_t start, end;
};

struct ring {
	struct bracket b[RING];
	unsigned head, tail; /* pending: [tail, head) */
	hipEvent_t spare[2 * RING];
	unsigned nspare;
};

static __thread struct ring ring;

static int events_ready(void)
{
	int s = atomic_load_explicit(&ev.state, memory_order_acquire);

	if (s)
		return s > 0;
	ev.create = (ev_create_fn)cnl_hip_real_sym("hipEventCreate");
	ev.destroy = (ev_one_fn)cnl_hip_real_sym("hipEventDestroy");
	ev.query = (ev_one_fn)cnl_hip_real_sym("hipEventQuery");
	ev.sync = (ev_one_fn)cnl_hip_real_sym("hipEventSynchronize");
	ev.record = (ev_record_fn)cnl_hip_real_sym("hipEventRecord");
	ev.elapsed = (ev_elapsed_fn)cnl_hip_real_sym("hipEventElapsedTime");
	s = ev.create && ev.destroy && ev.query && ev.sync && ev.record &&
	            ev.elapsed
	        ? 1
	        : -1;
	atomic_store_explicit(&ev.state, s, memory_order_release);
	return s > 0;
}

static int active(void)
{
	unsigned pct;

	cnl_hip_init();
	if (cnl_hip.mode != CNL_HIP_ON)
		return 0;
	pct = atomic_load_explicit(&cnl_hip.r->share_pct, memory_order_relaxed);
	return pct > 0 && pct < 100;
}

static unsigned rate(uint64_t now)
{
	return cnl_guard_rate(cnl_hip.r, cnl_hip.board, now);
}

static hipEvent_t take_event(void)
{
	hipEvent_t e = NULL;

	if (ring.nspare)
		return ring.spare[--ring.nspare];
	if (ev.create(&e) != hipSuccess)
		return NULL;
	return e;
}

static void give_event(hipEvent_t e)
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
	struct cnl_region *r = cnl_hip.r;

	if (cnl_hip.slot < 0)
		return;
	atomic_fetch_add_explicit(&r->procs[cnl_hip.slot].busy_ns, ns,
	                          memory_order_relaxed);
	cnl_bucket_charge(
	    &r->bucket, (int64_t)ns,
	    atomic_load_explicit(&r->burst_ns, memory_order_relaxed));
}

void cnl_hip_throttle_harvest(int wait_all)
{
	if (cnl_hip.mode != CNL_HIP_ON || ring.head == ring.tail)
		return;
	while (ring.tail != ring.head) {
		struct bracket *b = &ring.b[ring.tail % RING];
		hipError_t rc = wait_all ? ev.sync(b->end) : ev.query(b->end);
		float ms = 0;

		if (rc == hipErrorNotReady)
			break;
		if (rc == hipSuccess &&
		    ev.elapsed(&ms, b->start, b->end) == hipSuccess && ms > 0)
			charge((uint64_t)((double)ms * 1e6));
		give_event(b->start);
		give_event(b->end);
		ring.tail++;
	}
}

static void before(void)
{
	struct cnl_region *r = cnl_hip.r;
	uint64_t t0 = 0;

	for (;;) {
		uint64_t now = cnl_hip_now_ns();
		unsigned pct = rate(now);
		uint64_t burst =
		    atomic_load_explicit(&r->burst_ns, memory_order_relaxed);
		int64_t tokens;
		struct timespec ts;
		uint64_t wait;

		if (pct >= 100 && cnl_hip.board < 0)
			break;
		cnl_bucket_refill(&r->bucket, now, pct ? pct : 1, burst);
		tokens = atomic_load_explicit(&r->bucket.tokens,
		                              memory_order_relaxed);
		if (tokens > 0)
			break;
		if (!t0)
			t0 = now;
		cnl_hip_throttle_harvest(0);
		wait = (uint64_t)(-tokens) * 100 / (pct ? pct : 1);
		wait = wait < 20000 ? 20000 : wait > 5000000 ? 5000000 : wait;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)wait;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (t0 && cnl_hip.slot >= 0)
		atomic_fetch_add_explicit(&r->procs[cnl_hip.slot].throttle_ns,
		                          cnl_hip_now_ns() - t0,
		                          memory_order_relaxed);
}

static hipStream_t bracket_stream(hipStream_t s, int spt)
{
	return spt && !s ? hipStreamPerThread : s;
}

static struct bracket *measure_begin(hipStream_t s, int spt)
{
	struct bracket *b;

	if (!events_ready())
		return NULL;
	if (ring.head - ring.tail >= HARVEST_BATCH)
		cnl_hip_throttle_harvest(0);
	if (ring.head - ring.tail >= RING) {
		ev.sync(ring.b[ring.tail % RING].end);
		cnl_hip_throttle_harvest(0);
	}
	b = &ring.b[ring.head % RING];
	b->start = take_event();
	b->end = take_event();
	if (!b->start || !b->end ||
	    ev.record(b->start, bracket_stream(s, spt)) != hipSuccess) {
		if (b->start)
			ev.destroy(b->start);
		if (b->end)
			ev.destroy(b->end);
		return NULL;
	}
	return b;
}

static void measure_end(struct bracket *b, hipStream_t s, int spt,
                        hipError_t rc)
{
	if (cnl_hip.slot >= 0)
		atomic_fetch_add_explicit(
		    &cnl_hip.r->procs[cnl_hip.slot].launches, 1,
		    memory_order_relaxed);
	if (!b)
		return;
	if (rc != hipSuccess ||
	    ev.record(b->end, bracket_stream(s, spt)) != hipSuccess) {
		give_event(b->start);
		give_event(b->end);
		return;
	}
	ring.head++;
}

#define THROTTLED(real, stream, spt, call)             \
	do {                                           \
		struct bracket *m_;                    \
		hipError_t rc_;                        \
		if (!(real))                           \
			return hipErrorNotInitialized; \
		if (!active())                         \
			return call;                   \
		before();                              \
		m_ = measure_begin(stream, spt);       \
		rc_ = call;                            \
		measure_end(m_, stream, spt, rc_);     \
		return rc_;                            \
	} while (0)

hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block, void **args,
                           size_t shm, hipStream_t stream)
{
	cnl_hip_real_hipLaunchKernel_t real = CNL_HIP_REAL(hipLaunchKernel);

	THROTTLED(real, stream, 0, real(f, grid, block, args, shm, stream));
}

hipError_t hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block,
                               void **args, size_t shm, hipStream_t stream)
{
	cnl_hip_real_hipLaunchKernel_spt_t real =
	    CNL_HIP_REAL(hipLaunchKernel_spt);

	THROTTLED(real, stream, 1, real(f, grid, block, args, shm, stream));
}

hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block, void **args,
                              size_t shm, hipStream_t stream, hipEvent_t start,
                              hipEvent_t stop, int flags)
{
	cnl_hip_real_hipExtLaunchKernel_t real =
	    CNL_HIP_REAL(hipExtLaunchKernel);

	THROTTLED(real, stream, 0,
	          real(f, grid, block, args, shm, stream, start, stop, flags));
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx,
                                 unsigned int gy, unsigned int gz,
                                 unsigned int bx, unsigned int by,
                                 unsigned int bz, unsigned int shm,
                                 hipStream_t stream, void **params,
                                 void **extra)
{
	cnl_hip_real_hipModuleLaunchKernel_t real =
	    CNL_HIP_REAL(hipModuleLaunchKernel);

	THROTTLED(real, stream, 0,
	          real(f, gx, gy, gz, bx, by, bz, shm, stream, params, extra));
}

hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy,
                                    uint32_t gz, uint32_t lx, uint32_t ly,
                                    uint32_t lz, size_t shm, hipStream_t stream,
                                    void **params, void **extra,
                                    hipEvent_t start, hipEvent_t stop,
                                    uint32_t flags)
{
	cnl_hip_real_hipExtModuleLaunchKernel_t real =
	    CNL_HIP_REAL(hipExtModuleLaunchKernel);

	THROTTLED(real, stream, 0,
	          real(f, gx, gy, gz, lx, ly, lz, shm, stream, params, extra,
	               start, stop, flags));
}

/* hip_ext.h's launches under the C++ names the runtime exports them by. */
hipError_t
_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j(
    hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
    uint32_t ly, uint32_t lz, size_t shm, hipStream_t stream, void **params,
    void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags)
{
	cnl_hip_real__Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j_t
	    real = CNL_HIP_REAL(
	        _Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j);

	THROTTLED(real, stream, 0,
	          real(f, gx, gy, gz, lx, ly, lz, shm, stream, params, extra,
	               start, stop, flags));
}

hipError_t
_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_(
    hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
    uint32_t ly, uint32_t lz, size_t shm, hipStream_t stream, void **params,
    void **extra, hipEvent_t start, hipEvent_t stop)
{
	cnl_hip_real__Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6__t
	    real = CNL_HIP_REAL(
	        _Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_);

	THROTTLED(real, stream, 0,
	          real(f, gx, gy, gz, lx, ly, lz, shm, stream, params, extra,
	               start, stop));
}

hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block,
                                      void **args, unsigned int shm,
                                      hipStream_t stream)
{
	cnl_hip_real_hipLaunchCooperativeKernel_t real =
	    CNL_HIP_REAL(hipLaunchCooperativeKernel);

	THROTTLED(real, stream, 0, real(f, grid, block, args, shm, stream));
}

hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 grid, dim3 block,
                                          void **args, uint32_t shm,
                                          hipStream_t stream)
{
	cnl_hip_real_hipLaunchCooperativeKernel_spt_t real =
	    CNL_HIP_REAL(hipLaunchCooperativeKernel_spt);

	THROTTLED(real, stream, 1, real(f, grid, block, args, shm, stream));
}

hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream)
{
	cnl_hip_real_hipGraphLaunch_t real = CNL_HIP_REAL(hipGraphLaunch);

	THROTTLED(real, stream, 0, real(exec, stream));
}

hipError_t hipGraphLaunch_spt(hipGraphExec_t exec, hipStream_t stream)
{
	cnl_hip_real_hipGraphLaunch_spt_t real =
	    CNL_HIP_REAL(hipGraphLaunch_spt);

	THROTTLED(real, stream, 1, real(exec, stream));
}

/* Launches the event brackets cannot measure (a kernel by its host
 * pointer, the legacy configure-then-launch path; several devices at
 * once): refused while the slice's share is enforced, one line per
 * process; untouched otherwise. */
static int launch_refused(const char *what)
{
	if (!active())
		return 0;
	cnl_hip_log_once(CNL_HIP_LOG_IPC_DENIED,
	                 "%s refused: the slice's compute share cannot be "
	                 "enforced on it",
	                 what);
	return 1;
}

hipError_t hipLaunchByPtr(const void *func)
{
	cnl_hip_real_hipLaunchByPtr_t real = CNL_HIP_REAL(hipLaunchByPtr);

	if (launch_refused("hipLaunchByPtr"))
		return hipErrorNotSupported;
	return real ? real(func) : hipErrorNotInitialized;
}

hipError_t hipLaunchCooperativeKernelMultiDevice(hipLaunchParams *list, int n,
                                                 unsigned int flags)
{
	cnl_hip_real_hipLaunchCooperativeKernelMultiDevice_t real =
	    CNL_HIP_REAL(hipLaunchCooperativeKernelMultiDevice);

	if (launch_refused("hipLaunchCooperativeKernelMultiDevice"))
		return hipErrorNotSupported;
	return real ? real(list, n, flags) : hipErrorNotInitialized;
}

hipError_t hipExtLaunchMultiKernelMultiDevice(hipLaunchParams *list, int n,
                                              unsigned int flags)
{
	cnl_hip_real_hipExtLaunchMultiKernelMultiDevice_t real =
	    CNL_HIP_REAL(hipExtLaunchMultiKernelMultiDevice);

	if (launch_refused("hipExtLaunchMultiKernelMultiDevice"))
		return hipErrorNotSupported;
	return real ? real(list, n, flags) : hipErrorNotInitialized;
}
