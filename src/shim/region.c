/*
 * region.c - create, map, claim, charge and reap the slice's shared region
 * (layout and invariants in region.h).
 *
 * Crash safety rests on two kernel mechanisms and nothing else:
 *  - the accounting lock is a robust process-shared mutex: a process that
 *    dies holding it hands the next locker EOWNERDEAD, and the next locker
 *    repairs region.used from the per-process slots (invariant 1);
 *  - slot ownership is a POSIX record lock on one byte of the file per
 *    slot: released by the kernel at process death, never inherited across
 *    fork, and tested without looking at PIDs (invariant 2).
 * This file is linked into the shim (libc only, no logging, never aborts)
 * and into the node agent and the tests as the static cnlab-region.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim/region.h"

#define CNL_MIN_U64(a, b) ((a) < (b) ? (a) : (b))

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap - 1) : 0;

	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Write a freshly initialised object to a temporary file, then rename. */
static int publish(const char *path, const void *obj, size_t size)
{
	char tmp[4096];
	int fd, rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
	    (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return -errno;
	for (size_t off = 0; off < size;) {
		ssize_t n = write(fd, (const char *)obj + off, size - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto fail_write;
		}
		off += (size_t)n;
	}
	if (fsync(fd) < 0 || rename(tmp, path) < 0) {
		rc = -errno;
		goto fail_write;
	}
	close(fd);
	return 0;

fail_write:
	close(fd);
	unlink(tmp);
	return rc;
}

int cnl_region_create(const char *path, uint64_t quota, unsigned share_pct,
                      const char *project, const struct cnl_region_opts *opts)
{
	struct cnl_region *r;
	pthread_mutexattr_t attr;
	uint64_t burst;
	int rc;

	if (!path || !project || share_pct > 100)
		return -EINVAL;
	if (strlen(project) >= CNL_REGION_PROJECT_MAX ||
	    (opts && opts->board &&
	     strlen(opts->board) >= CNL_REGION_PATH_MAX) ||
	    (opts && opts->ipc_dir &&
	     strlen(opts->ipc_dir) >= CNL_REGION_PATH_MAX))
		return -ENAMETOOLONG;
	/* Built in anonymous memory, so the mutex is initialised in place. */
	r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r == MAP_FAILED)
		return -errno;
	r->magic = CNL_REGION_MAGIC;
	r->version = CNL_REGION_VERSION;
	r->size = sizeof(*r);
	copy_str(r->project, sizeof(r->project), project);
	copy_str(r->board, sizeof(r->board), opts ? opts->board : NULL);
	copy_str(r->ipc_dir, sizeof(r->ipc_dir), opts ? opts->ipc_dir : NULL);
	burst = opts && opts->burst_ns ? opts->burst_ns : CNL_REGION_BURST_NS;
	atomic_store(&r->quota, quota);
	atomic_store(&r->share_pct, share_pct);
	atomic_store(&r->ctx_reserve, opts ? opts->ctx_reserve : 0);
	atomic_store(&r->board_slot, opts && opts->board_slot < CNL_BOARD_SLICES
	                                 ? opts->board_slot
	                                 : 0);
	atomic_store(&r->burst_ns, burst);
	atomic_store(&r->bucket.tokens, (int64_t)burst);
	atomic_store(&r->bucket.stamp, now_ns());
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&r->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	rc = publish(path, r, sizeof(*r));
	munmap(r, sizeof(*r));
	return rc;
}

int cnl_board_create(const char *path)
{
	struct cnl_board *b;
	int rc;

	if (!path)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->magic = CNL_BOARD_MAGIC;
	b->version = CNL_REGION_VERSION;
	b->size = sizeof(*b);
	rc = publish(path, b, sizeof(*b));
	free(b);
	return rc;
}

unsigned cnl_board_rate(struct cnl_board *b, unsigned slot, unsigned share_pct,
                        uint64_t now_ns)
{
	uint64_t sum = 0;

	if (!b || slot >= CNL_BOARD_SLICES || !share_pct)
		return share_pct;
	atomic_store_explicit(&b->slices[slot].share_pct, share_pct,
	                      memory_order_relaxed);
	atomic_store_explicit(&b->slices[slot].active_ns, now_ns,
	                      memory_order_relaxed);
	for (unsigned i = 0; i < CNL_BOARD_SLICES; i++) {
		uint64_t a = atomic_load_explicit(&b->slices[i].active_ns,
		                                  memory_order_relaxed);
		if (i != slot && (a == 0 || now_ns - a > CNL_BOARD_ACTIVE_NS))
			continue;
		sum += i == slot ? share_pct
		                 : atomic_load_explicit(&b->slices[i].share_pct,
		                                        memory_order_relaxed);
	}
	if (sum <= share_pct)
		return 100;
	return (unsigned)CNL_MIN_U64(100, share_pct * 100 / sum);
}

static void *map_file(const char *path, size_t size, int *ret_fd)
{
	struct stat st;
	void *p;
	int fd;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < size) {
		close(fd);
		errno = EPROTO;
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	if (ret_fd)
		*ret_fd = fd;
	else
		close(fd);
	return p;
}

int cnl_region_map(const char *path, struct cnl_region_handle *ret)
{
	struct cnl_region *r;
	int fd;

	if (!path || !ret)
		return -EINVAL;
	r = map_file(path, sizeof(*r), &fd);
	if (!r)
		return -errno;
	if (r->magic != CNL_REGION_MAGIC || r->version != CNL_REGION_VERSION ||
	    r->size != sizeof(*r)) {
		munmap(r, sizeof(*r));
		close(fd);
		return -EPROTO;
	}
	ret->r = r;
	ret->fd = fd;
	return 0;
}

void cnl_region_unmap(struct cnl_region_handle *h)
{
	if (!h || !h->r)
		return;
	munmap(h->r, sizeof(*h->r));
	close(h->fd);
	h->r = NULL;
	h->fd = -1;
}

struct cnl_board *cnl_board_map(const char *path)
{
	struct cnl_board *b = map_file(path, sizeof(*b), NULL);

	if (b && (b->magic != CNL_BOARD_MAGIC ||
	          b->version != CNL_REGION_VERSION || b->size != sizeof(*b))) {
		munmap(b, sizeof(*b));
		return NULL;
	}
	return b;
}

int cnl_region_set_quota(struct cnl_region *r, uint64_t bytes)
{
	if (!r)
		return -EINVAL;
	atomic_store(&r->quota, bytes);
	return 0;
}

int cnl_region_set_share(struct cnl_region *r, unsigned share_pct)
{
	if (!r || share_pct > 100)
		return -EINVAL;
	atomic_store(&r->share_pct, share_pct);
	return 0;
}

/* Invariant 1 restored after a process died holding the lock. */
static void repair(struct cnl_region *r)
{
	uint64_t sum = 0;

	for (int i = 0; i < CNL_REGION_PROCS; i++)
		if (atomic_load(&r->procs[i].state) == CNL_PROC_LIVE)
			sum += atomic_load(&r->procs[i].used);
	atomic_store(&r->used, sum);
	atomic_fetch_add(&r->repairs, 1);
}

static void lock(struct cnl_region *r)
{
	int rc = pthread_mutex_lock(&r->lock);

	if (rc == EOWNERDEAD) {
		repair(r);
		pthread_mutex_consistent(&r->lock);
	}
}

static void unlock(struct cnl_region *r)
{
	pthread_mutex_unlock(&r->lock);
}

static void raise_peak(_Atomic uint64_t *peak, uint64_t v)
{
	uint64_t p = atomic_load(peak);

	while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
		;
}

/* Non-blocking POSIX lock (F_WRLCK) or unlock (F_UNLCK) of slot's byte. */
static int slot_lock(int fd, int slot, short type)
{
	struct flock fl = {
	    .l_type = type,
	    .l_whence = SEEK_SET,
	    .l_start = CNL_REGION_LOCK_BASE + slot,
	    .l_len = 1,
	};

	while (fcntl(fd, F_SETLK, &fl) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

/* Return a dead owner's memory; called holding the slot's byte lock. */
static int reap_slot(struct cnl_region *r, int i)
{
	struct cnl_region_proc *p = &r->procs[i];
	uint64_t u;
	int reaped = 0;

	lock(r);
	if (atomic_load(&p->state) == CNL_PROC_LIVE) {
		u = atomic_load(&p->used);
		atomic_store(&r->used, atomic_load(&r->used) - u);
		atomic_store(&p->used, 0);
		atomic_store(&p->state, CNL_PROC_FREE);
		atomic_fetch_add(&p->gen, 1);
		atomic_fetch_add(&r->reaped, 1);
		reaped = 1;
	}
	unlock(r);
	return reaped;
}

static pid_t host_pid(void)
{
	char line[256];
	pid_t pid = getpid();
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return pid;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) == 0) {
			pid = (pid_t)strtol(line + 6, NULL, 10);
			break;
		}
	}
	fclose(f);
	return pid;
}

int cnl_region_attach(struct cnl_region_handle *h)
{
	struct cnl_region *r;
	pid_t hp;

	if (!h || !h->r)
		return -EINVAL;
	r = h->r;
	hp = host_pid();
	for (int i = 0; i < CNL_REGION_PROCS; i++) {
		struct cnl_region_proc *p = &r->procs[i];

		if (slot_lock(h->fd, i, F_WRLCK) < 0)
			continue; /* a live process owns it */
		reap_slot(r, i);
		lock(r);
		atomic_store(&p->used, 0);
		atomic_store(&p->peak, 0);
		atomic_store(&p->busy_ns, 0);
		atomic_store(&p->launches, 0);
		atomic_store(&p->throttle_ns, 0);
		atomic_store(&p->oom, 0);
		atomic_store(&p->pid, (int32_t)getpid());
		atomic_store(&p->host_pid, (int32_t)hp);
		atomic_fetch_add(&p->gen, 1);
		atomic_store(&p->state, CNL_PROC_LIVE);
		unlock(r);
		return i;
	}
	return -EBUSY;
}

void cnl_region_detach(struct cnl_region_handle *h, int slot)
{
	if (!h || !h->r || slot < 0 || slot >= CNL_REGION_PROCS)
		return;
	reap_slot(h->r, slot);
	slot_lock(h->fd, slot, F_UNLCK);
}

int cnl_region_reserve(struct cnl_region *r, int slot, uint64_t bytes,
                       int force)
{
	struct cnl_region_proc *p;
	uint64_t quota, used;

	if (!r || slot < 0 || slot >= CNL_REGION_PROCS)
		return -EINVAL;
	p = &r->procs[slot];
	lock(r);
	quota = atomic_load(&r->quota);
	used = atomic_load(&r->used);
	if (!force && quota && (bytes > quota || used > quota - bytes)) {
		atomic_fetch_add(&r->oom, 1);
		atomic_fetch_add(&p->oom, 1);
		unlock(r);
		return -ENOMEM;
	}
	/* Slot first: a death between the two stores is repaired from it. */
	atomic_store(&p->used, atomic_load(&p->used) + bytes);
	atomic_store(&r->used, used + bytes);
	raise_peak(&p->peak, atomic_load(&p->used));
	raise_peak(&r->peak, used + bytes);
	unlock(r);
	return 0;
}

void cnl_region_unreserve(struct cnl_region *r, int slot, uint64_t bytes)
{
	struct cnl_region_proc *p;
	uint64_t have, used;

	if (!r || slot < 0 || slot >= CNL_REGION_PROCS)
		return;
	p = &r->procs[slot];
	lock(r);
	have = atomic_load(&p->used);
	if (bytes > have)
		bytes = have;
	atomic_store(&p->used, have - bytes);
	used = atomic_load(&r->used);
	atomic_store(&r->used, used > bytes ? used - bytes : 0);
	unlock(r);
}

int cnl_region_reap(struct cnl_region_handle *h, int own_slot)
{
	int n = 0;

	if (!h || !h->r)
		return -EINVAL;
	for (int i = 0; i < CNL_REGION_PROCS; i++) {
		if (i == own_slot ||
		    atomic_load(&h->r->procs[i].state) != CNL_PROC_LIVE)
			continue;
		if (slot_lock(h->fd, i, F_WRLCK) < 0)
			continue; /* alive */
		n += reap_slot(h->r, i);
		slot_lock(h->fd, i, F_UNLCK);
	}
	return n;
}

int cnl_region_stat(struct cnl_region *r, struct cnl_region_stat *ret)
{
	unsigned n = 0;

	if (!r || !ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	lock(r);
	ret->quota = atomic_load(&r->quota);
	ret->used = atomic_load(&r->used);
	ret->peak = atomic_load(&r->peak);
	ret->oom = atomic_load(&r->oom);
	ret->reaped = atomic_load(&r->reaped);
	ret->repairs = atomic_load(&r->repairs);
	for (int i = 0; i < CNL_REGION_PROCS; i++) {
		struct cnl_region_proc *p = &r->procs[i];

		if (atomic_load(&p->state) != CNL_PROC_LIVE)
			continue;
		ret->procs[n].slot = i;
		ret->procs[n].pid = atomic_load(&p->pid);
		ret->procs[n].host_pid = atomic_load(&p->host_pid);
		ret->procs[n].used = atomic_load(&p->used);
		ret->procs[n].peak = atomic_load(&p->peak);
		ret->procs[n].busy_ns = atomic_load(&p->busy_ns);
		ret->procs[n].launches = atomic_load(&p->launches);
		n++;
	}
	ret->nprocs = n;
	unlock(r);
	return 0;
}

/* A depth of 0 (a region written by hand, or zeroed) would cap the
 * tokens at 0 for ever, and every launch would wait for ever: it means
 * the default, as at creation. */
static uint64_t depth(uint64_t burst_ns)
{
	return burst_ns ? burst_ns : CNL_REGION_BURST_NS;
}

void cnl_bucket_refill(struct cnl_bucket *b, uint64_t now, unsigned pct,
                       uint64_t burst_ns)
{
	uint64_t stamp = atomic_load_explicit(&b->stamp, memory_order_relaxed);
	int64_t add, t;

	/* Credit in steps of at least 10 us: fewer atomics per launch, and
	 * a launch sees at most 10 us of refill late. */
	if (now <= stamp || now - stamp < 10000)
		return;
	/* Whoever moves the stamp credits the interval; the others skip. */
	if (!atomic_compare_exchange_strong(&b->stamp, &stamp, now))
		return;
	add = (int64_t)((now - stamp) * pct / 100);
	burst_ns = depth(burst_ns);
	t = atomic_fetch_add(&b->tokens, add) + add;
	while (t > (int64_t)burst_ns &&
	       !atomic_compare_exchange_weak(&b->tokens, &t, (int64_t)burst_ns))
		;
}

void cnl_bucket_charge(struct cnl_bucket *b, int64_t ns, uint64_t burst_ns)
{
	/* Debt is bounded so that one huge kernel cannot starve for ever. */
	int64_t floor = -(int64_t)depth(burst_ns) * 50;
	int64_t t = atomic_fetch_sub(&b->tokens, ns) - ns;

	while (t < floor &&
	       !atomic_compare_exchange_weak(&b->tokens, &t, floor))
		;
}
