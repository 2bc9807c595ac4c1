/*
 * region.c - create, map, claim, charge and reap the slice's shared region
 * (layout and invariants in region.h).
 *
 * Nothing here takes a lock that another process can hold: accounting is
 * atomic adds on the caller's own slot and bounded sums over the others
 * (invariant 1), slot ownership is a POSIX record lock on one byte of the
 * accounting file per slot, only ever tried with F_SETLK, never waited
 * for (invariant 2).  The kernel drops those locks at process death, so a
 * dead process's slot is found and zeroed by whoever looks next (at most
 * every CNL_REGION_REAP_NS in each process, invariant 3).
 *
 * POSIX record locks belong to the process, not to the descriptor: a
 * process that tries F_SETLK on a byte it already holds succeeds, and
 * F_UNLCK would drop its own claim.  So this file remembers, per mapped
 * accounting file (device and inode), which slots this process owns, and
 * the reaper never touches them.  That table (and the descriptor a reap
 * needs, for the calls that get only the region pointer) is process-local
 * memory under a process-local mutex: no tenant can write or hold it.
 *
 * This file is linked into the shim (libc only, no logging, never aborts)
 * and into the node agent and the tests as the static cnlab-region.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim/region.h"

#define CNL_MIN_U64(a, b) ((a) < (b) ? (a) : (b))
#define ACCT_OFF          CNL_REGION_LIMITS_SIZE
#define ACCT_SIZE         (sizeof(struct cnl_region) - ACCT_OFF)

_Static_assert(offsetof(struct cnl_region, acct_magic) == ACCT_OFF,
               "the accounting file starts on the second page");
_Static_assert(offsetof(struct cnl_region, burst_ns) + 8 <= ACCT_OFF,
               "the limits fit their page");

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A vDSO read of the tick clock: cheap enough for the allocation path. */
static uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap - 1) : 0;

	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Write size bytes of obj to a temporary file of exactly the given mode
 * (0: 0666 less the umask), then rename it to path. */
static int publish(const char *path, const void *obj, size_t size, mode_t mode)
{
	char tmp[4096];
	int fd, rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
	    (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
	          mode ? mode : 0666);
	if (fd < 0)
		return -errno;
	if (mode && fchmod(fd, mode) < 0) {
		rc = -errno;
		goto fail_write;
	}
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

int cnl_region_acct_path(const char *path, char *buf, size_t cap)
{
	if (!path || !buf)
		return -EINVAL;
	if ((size_t)snprintf(buf, cap, "%s%s", path, CNL_REGION_ACCT_SUFFIX) >=
	    cap)
		return -ENAMETOOLONG;
	return 0;
}

void cnl_region_remove(const char *path)
{
	char acct[4096];

	if (!path)
		return;
	unlink(path);
	if (cnl_region_acct_path(path, acct, sizeof(acct)) == 0)
		unlink(acct);
}

int cnl_region_create(const char *path, uint64_t quota, unsigned share_pct,
                      const char *project, const struct cnl_region_opts *opts)
{
	struct cnl_region *r;
	char acct[4096];
	uint64_t burst;
	int rc;

	if (!path || !project || share_pct > 100)
		return -EINVAL;
	if (strlen(project) >= CNL_REGION_PROJECT_MAX ||
	    (opts && opts->board &&
	     strlen(opts->board) >= CNL_REGION_PATH_MAX) ||
	    (opts && opts->ipc_dir &&
	     strlen(opts->ipc_dir) >= CNL_REGION_PATH_MAX) ||
	    cnl_region_acct_path(path, acct, sizeof(acct)) < 0)
		return -ENAMETOOLONG;
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
	r->acct_magic = CNL_REGION_ACCT_MAGIC;
	r->acct_version = CNL_REGION_VERSION;
	r->acct_size = sizeof(*r);
	atomic_store(&r->bucket.tokens, (int64_t)burst);
	atomic_store(&r->bucket.stamp, now_ns());
	/* The accounting first: a limits file never names a missing one. */
	rc = publish(acct, (const char *)r + ACCT_OFF, ACCT_SIZE, 0600);
	if (rc == 0)
		rc = publish(path, r, ACCT_OFF, 0644);
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
	b->version = CNL_BOARD_VERSION;
	b->size = sizeof(*b);
	rc = publish(path, b, sizeof(*b), 0);
	free(b);
	return rc;
}

/*
 * The rate of the slice in row slot from a snapshot of the board's rows.
 * Any slice of the GPU can write any row (the board is one file they all
 * write), so a row's share counts at most 100, and the answer is never
 * below the slice's own share: the shares the agent gives out on one board
 * sum to 100 at most, so share * 100 / sum >= share for every honest
 * board, and forged rows (huge shares, other rows kept "active") can take
 * from a slice only the idle time of others, never its own share.
 */
static unsigned rate_of(const struct cnl_board_slice *rows, unsigned slot,
                        unsigned share_pct, uint64_t now_ns)
{
	uint64_t sum = share_pct, rate;

	for (unsigned i = 0; i < CNL_BOARD_SLICES; i++) {
		uint64_t a = atomic_load_explicit(&rows[i].active_ns,
		                                  memory_order_relaxed);
		if (i == slot || a == 0 || now_ns - a > CNL_BOARD_ACTIVE_NS)
			continue;
		sum += CNL_MIN_U64(100,
		                   atomic_load_explicit(&rows[i].share_pct,
		                                        memory_order_relaxed));
	}
	rate = CNL_MIN_U64(100, (uint64_t)share_pct * 100 / sum);
	return (unsigned)(rate < share_pct ? CNL_MIN_U64(100, share_pct)
	                                   : rate);
}

unsigned cnl_board_rate(struct cnl_board *b, unsigned slot, unsigned share_pct,
                        uint64_t now_ns)
{
	if (!b || slot >= CNL_BOARD_SLICES || !share_pct)
		return share_pct;
	atomic_store_explicit(&b->slices[slot].share_pct, share_pct,
	                      memory_order_relaxed);
	atomic_store_explicit(&b->slices[slot].active_ns, now_ns,
	                      memory_order_relaxed);
	return rate_of(b->slices, slot, share_pct, now_ns);
}

int cnl_board_open(const char *path)
{
	struct cnl_board head;
	struct stat st;
	int fd;

	if (!path || !path[0])
		return -EINVAL;
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size < sizeof(head) ||
	    pread(fd, &head, offsetof(struct cnl_board, slices), 0) !=
	        (ssize_t)offsetof(struct cnl_board, slices) ||
	    head.magic != CNL_BOARD_MAGIC ||
	    head.version != CNL_BOARD_VERSION || head.size != sizeof(head)) {
		close(fd);
		return -EPROTO;
	}
	return fd;
}

unsigned cnl_board_rate_fd(int fd, unsigned slot, unsigned share_pct,
                           uint64_t now_ns)
{
	struct cnl_board_slice rows[CNL_BOARD_SLICES];
	struct cnl_board_slice own;
	off_t off = (off_t)offsetof(struct cnl_board, slices);

	if (fd < 0 || slot >= CNL_BOARD_SLICES || !share_pct)
		return share_pct;
	memset(&own, 0, sizeof(own));
	atomic_store_explicit(&own.share_pct, share_pct, memory_order_relaxed);
	atomic_store_explicit(&own.active_ns, now_ns, memory_order_relaxed);
	/* A board cut short (or unwritable) leaves the slice at its share. */
	if (pwrite(fd, &own, sizeof(own), off + (off_t)(slot * sizeof(own))) !=
	        (ssize_t)sizeof(own) ||
	    pread(fd, rows, sizeof(rows), off) != (ssize_t)sizeof(rows))
		return share_pct;
	return rate_of(rows, slot, share_pct, now_ns);
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

/* Process-local table of mapped regions ---------------------------------- */

#define MAPS 1024

static struct mapped {
	struct cnl_region *r; /* NULL: free entry */
	int fd;               /* the accounting file */
	int limits_rw;
	dev_t dev;
	ino_t ino;
	uint64_t owned; /* slots this process claimed through this mapping */
} maps[MAPS];
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
/* Next time the allocation path of this process looks for the dead. */
static _Atomic uint64_t next_reap_ns;

static struct mapped *find_locked(const struct cnl_region *r)
{
	for (int i = 0; i < MAPS; i++)
		if (maps[i].r == r)
			return &maps[i];
	return NULL;
}

/* Slots this process owns in the accounting file of m (any mapping). */
static uint64_t owned_locked(const struct mapped *m)
{
	uint64_t own = 0;

	for (int i = 0; i < MAPS; i++)
		if (maps[i].r && maps[i].dev == m->dev && maps[i].ino == m->ino)
			own |= maps[i].owned;
	return own;
}

static int map_region(const char *path, int limits_rw,
                      struct cnl_region_handle *ret)
{
	char acct[4096];
	struct stat lst, ast;
	struct cnl_region *r;
	struct mapped *m;
	void *base;
	int lfd, afd = -1, rc;

	if (!path || !ret)
		return -EINVAL;
	if (sysconf(_SC_PAGESIZE) <= 0 ||
	    CNL_REGION_LIMITS_SIZE % sysconf(_SC_PAGESIZE) != 0)
		return -EPROTO;
	if ((rc = cnl_region_acct_path(path, acct, sizeof(acct))) < 0)
		return rc;
	lfd = limits_rw ? open(path, O_RDWR | O_CLOEXEC) : -1;
	if (lfd < 0 && limits_rw && errno != EACCES && errno != EROFS &&
	    errno != EPERM)
		return -errno;
	if (lfd < 0) {
		limits_rw = 0;
		lfd = open(path, O_RDONLY | O_CLOEXEC);
		if (lfd < 0)
			return -errno;
	}
	if (fstat(lfd, &lst) < 0) {
		rc = -errno;
		goto fail_limits;
	}
	if ((size_t)lst.st_size < ACCT_OFF) {
		rc = -EPROTO;
		goto fail_limits;
	}
	/* One reservation, the two files mapped into it back to back. */
	base = mmap(NULL, sizeof(*r), PROT_NONE,
	            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		goto fail_limits;
	}
	r = base;
	if (mmap(base, ACCT_OFF, PROT_READ | (limits_rw ? PROT_WRITE : 0),
	         MAP_SHARED | MAP_FIXED, lfd, 0) == MAP_FAILED) {
		rc = -errno;
		goto fail_map;
	}
	/* A foreign or older limits file is told as such before the
	 * accounting file is looked for.  The accounting file's own header
	 * is not checked: the limits file's version covers both (one
	 * creator), and a tenant who scribbles over it must not turn its
	 * slice's accounting (or the agent's view of it) off; garbage
	 * anywhere there is handled as garbage (invariant 5). */
	if (r->magic != CNL_REGION_MAGIC || r->version != CNL_REGION_VERSION ||
	    r->size != sizeof(*r)) {
		rc = -EPROTO;
		goto fail_map;
	}
	/* Never wait for the tenant: it owns the accounting file, so it may
	 * hold a lease on it that makes a plain open for writing block for
	 * the lease-break time (45 s); O_NONBLOCK fails with EWOULDBLOCK
	 * instead, and the caller skips the slice (agent) or fails closed
	 * (shim).  A regular file's reads and locks ignore the flag. */
	afd = open(acct, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (afd < 0 || fstat(afd, &ast) < 0) {
		rc = -errno;
		goto fail_map;
	}
	if ((size_t)ast.st_size < ACCT_SIZE) {
		rc = -EPROTO;
		goto fail_map;
	}
	if (mmap((char *)base + ACCT_OFF, ACCT_SIZE, PROT_READ | PROT_WRITE,
	         MAP_SHARED | MAP_FIXED, afd, 0) == MAP_FAILED) {
		rc = -errno;
		goto fail_map;
	}
	pthread_mutex_lock(&maps_lock);
	m = find_locked(NULL);
	if (m)
		*m = (struct mapped){.r = r,
		                     .fd = afd,
		                     .limits_rw = limits_rw,
		                     .dev = ast.st_dev,
		                     .ino = ast.st_ino};
	pthread_mutex_unlock(&maps_lock);
	if (!m) {
		rc = -EMFILE;
		goto fail_map;
	}
	close(lfd);
	ret->r = r;
	ret->fd = afd;
	return 0;

fail_map:
	munmap(base, sizeof(*r));
	if (afd >= 0)
		close(afd);
fail_limits:
	close(lfd);
	return rc;
}

int cnl_region_map(const char *path, struct cnl_region_handle *ret)
{
	return map_region(path, 1, ret);
}

int cnl_region_map_ro(const char *path, struct cnl_region_handle *ret)
{
	return map_region(path, 0, ret);
}

void cnl_region_unmap(struct cnl_region_handle *h)
{
	struct mapped *m;

	if (!h || !h->r)
		return;
	pthread_mutex_lock(&maps_lock);
	if ((m = find_locked(h->r)))
		m->r = NULL;
	pthread_mutex_unlock(&maps_lock);
	munmap(h->r, sizeof(*h->r));
	close(h->fd);
	h->r = NULL;
	h->fd = -1;
}

struct cnl_board *cnl_board_map(const char *path)
{
	struct cnl_board *b = map_file(path, sizeof(*b), NULL);

	if (b && (b->magic != CNL_BOARD_MAGIC ||
	          b->version != CNL_BOARD_VERSION || b->size != sizeof(*b))) {
		munmap(b, sizeof(*b));
		return NULL;
	}
	return b;
}

/* Whether this process mapped r's limits writable (the agent). */
static int limits_writable(const struct cnl_region *r)
{
	struct mapped *m;
	int rw;

	pthread_mutex_lock(&maps_lock);
	m = find_locked(r);
	rw = m && m->limits_rw;
	pthread_mutex_unlock(&maps_lock);
	return rw;
}

int cnl_region_set_quota(struct cnl_region *r, uint64_t bytes)
{
	if (!r)
		return -EINVAL;
	if (!limits_writable(r))
		return -EROFS;
	atomic_store(&r->quota, bytes);
	return 0;
}

int cnl_region_set_share(struct cnl_region *r, unsigned share_pct)
{
	if (!r || share_pct > 100)
		return -EINVAL;
	if (!limits_writable(r))
		return -EROFS;
	atomic_store(&r->share_pct, share_pct);
	return 0;
}

/* Accounting --------------------------------------------------------------- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static void note_spins(struct cnl_region_proc *p, uint64_t n)
{
	/* A racing writer may lose this maximum: it is a statistic. */
	if (n > atomic_load_explicit(&p->spins, memory_order_relaxed))
		atomic_store_explicit(&p->spins, n, memory_order_relaxed);
}

/* Raise *peak to v; bounded (invariant 5).  Returns the retries. */
static unsigned raise_peak(_Atomic uint64_t *peak, uint64_t v)
{
	uint64_t p = atomic_load_explicit(peak, memory_order_relaxed);
	unsigned n = 0;

	while (v > p && n < CNL_REGION_SPINS &&
	       !atomic_compare_exchange_weak_explicit(
	           peak, &p, v, memory_order_relaxed, memory_order_relaxed))
		n++;
	return n;
}

/* What the slice holds: own_val for own_slot (whatever the mask says),
 * plus every other slot of the live mask; saturating (invariant 5). */
static uint64_t sum_slots(struct cnl_region *r, int own_slot, uint64_t own_val)
{
	uint64_t mask = atomic_load(&r->live), sum = own_val;

	if (own_slot >= 0)
		mask &= ~(1ULL << own_slot);
	while (mask) {
		int i = __builtin_ctzll(mask);

		sum = sat_add(sum, atomic_load(&r->procs[i].used));
		mask &= mask - 1;
	}
	return sum;
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

	/* EINTR only: a signal, never the other process (F_SETLK). */
	for (int n = 0; fcntl(fd, F_SETLK, &fl) < 0; n++) {
		if (errno != EINTR || n >= CNL_REGION_SPINS)
			return -errno;
	}
	return 0;
}

/* Return a dead owner's memory; called holding the slot's byte lock. */
static int reap_slot(struct cnl_region *r, int i)
{
	struct cnl_region_proc *p = &r->procs[i];
	uint64_t bit = 1ULL << i;
	int was = atomic_load(&p->state) == CNL_PROC_LIVE ||
	          (atomic_load(&r->live) & bit) || atomic_load(&p->used);

	/* Out of the sum first, then zeroed: never counted half. */
	atomic_fetch_and(&r->live, ~bit);
	atomic_store(&p->used, 0);
	atomic_store(&p->state, CNL_PROC_FREE);
	if (!was)
		return 0;
	atomic_fetch_add(&p->gen, 1);
	atomic_fetch_add(&r->reaped, 1);
	return 1;
}

/* Reap the dead slots of r through fd; under maps_lock, so that no other
 * thread of this process claims or reaps a slot meanwhile (their F_SETLK
 * would succeed on the same byte: the lock is the process's). */
static int reap_locked(struct cnl_region *r, int fd, int own_slot)
{
	struct mapped *m = find_locked(r);
	uint64_t own = m ? owned_locked(m) : 0, cand;
	int n = 0;

	if (own_slot >= 0 && own_slot < CNL_REGION_PROCS)
		own |= 1ULL << own_slot;
	/* Candidates: the live mask and the slots that hold anything. */
	cand = atomic_load(&r->live);
	for (int i = 0; i < CNL_REGION_PROCS; i++)
		if (atomic_load(&r->procs[i].state) != CNL_PROC_FREE ||
		    atomic_load(&r->procs[i].used))
			cand |= 1ULL << i;
	cand &= ~own;
	while (cand) {
		int i = __builtin_ctzll(cand);

		cand &= cand - 1;
		if (slot_lock(fd, i, F_WRLCK) < 0)
			continue; /* alive */
		n += reap_slot(r, i);
		slot_lock(fd, i, F_UNLCK);
	}
	return n;
}

int cnl_region_reap(struct cnl_region_handle *h, int own_slot)
{
	int n;

	if (!h || !h->r)
		return -EINVAL;
	pthread_mutex_lock(&maps_lock);
	n = reap_locked(h->r, h->fd, own_slot);
	pthread_mutex_unlock(&maps_lock);
	return n;
}

/* Look for the dead when due: one coarse clock read otherwise. */
static void reap_due(struct cnl_region *r)
{
	uint64_t now = coarse_ns(),
	         due =
	             atomic_load_explicit(&next_reap_ns, memory_order_relaxed);
	struct mapped *m;

	if (now < due || !atomic_compare_exchange_strong(
	                     &next_reap_ns, &due, now + CNL_REGION_REAP_NS))
		return;
	pthread_mutex_lock(&maps_lock);
	if ((m = find_locked(r)))
		reap_locked(r, m->fd, -1);
	pthread_mutex_unlock(&maps_lock);
}

/* The outermost NSpid (what NVML on the host shows): one read of
 * /proc/self/status, no stdio. */
static pid_t host_pid(void)
{
	char buf[4096];
	const char *p;
	pid_t pid = getpid();
	ssize_t n = 0;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return pid;
	while ((n = read(fd, buf, sizeof(buf) - 1)) < 0 && errno == EINTR)
		;
	close(fd);
	if (n <= 0)
		return pid;
	buf[n] = '\0';
	p = strstr(buf, "\nNSpid:");
	if (p)
		pid = (pid_t)strtol(p + 7, NULL, 10);
	return pid > 0 ? pid : getpid();
}

int cnl_region_attach(struct cnl_region_handle *h)
{
	struct cnl_region *r;
	struct mapped *m;
	uint64_t own;
	pid_t hp;
	int slot = -EBUSY;

	if (!h || !h->r)
		return -EINVAL;
	r = h->r;
	hp = host_pid();
	pthread_mutex_lock(&maps_lock);
	m = find_locked(r);
	own = m ? owned_locked(m) : 0;
	for (int i = 0; i < CNL_REGION_PROCS; i++) {
		struct cnl_region_proc *p = &r->procs[i];

		if ((own & (1ULL << i)) || slot_lock(h->fd, i, F_WRLCK) < 0)
			continue; /* ours already, or a live process's */
		reap_slot(r, i);
		atomic_store(&p->peak, 0);
		atomic_store(&p->busy_ns, 0);
		atomic_store(&p->launches, 0);
		atomic_store(&p->throttle_ns, 0);
		atomic_store(&p->oom, 0);
		atomic_store(&p->spins, 0);
		atomic_store(&p->pid, (int32_t)getpid());
		atomic_store(&p->host_pid, (int32_t)hp);
		atomic_fetch_add(&p->gen, 1);
		atomic_store(&p->state, CNL_PROC_LIVE);
		/* Counted from now on: used is 0 and only we add to it. */
		atomic_fetch_or(&r->live, 1ULL << i);
		if (m)
			m->owned |= 1ULL << i;
		slot = i;
		break;
	}
	pthread_mutex_unlock(&maps_lock);
	return slot;
}

void cnl_region_detach(struct cnl_region_handle *h, int slot)
{
	struct mapped *m;

	if (!h || !h->r || slot < 0 || slot >= CNL_REGION_PROCS)
		return;
	pthread_mutex_lock(&maps_lock);
	reap_slot(h->r, slot);
	if ((m = find_locked(h->r)))
		m->owned &= ~(1ULL << slot);
	slot_lock(h->fd, slot, F_UNLCK);
	pthread_mutex_unlock(&maps_lock);
}

int cnl_region_reserve(struct cnl_region *r, int slot, uint64_t bytes,
                       int force)
{
	struct cnl_region_proc *p;
	uint64_t quota, old, mine, sum;
	unsigned spins;

	if (!r || slot < 0 || slot >= CNL_REGION_PROCS)
		return -EINVAL;
	p = &r->procs[slot];
	reap_due(r);
	if (!bytes)
		return 0; /* nothing to count, whatever the others hold */
	quota = atomic_load(&r->quota);
	if (!force && quota && bytes > quota)
		goto refuse;
	/* Own slot first, then the others (invariant 1). */
	old = atomic_fetch_add(&p->used, bytes);
	if (!force && old > UINT64_MAX - bytes) {
		/* Our slot holds garbage: whatever it means, it is over. */
		atomic_fetch_sub(&p->used, bytes);
		goto refuse;
	}
	mine = old + bytes;
	sum = sum_slots(r, slot, mine);
	if (!force && quota && sum > quota) {
		atomic_fetch_sub(&p->used, bytes);
		goto refuse;
	}
	spins = raise_peak(&p->peak, mine);
	spins += raise_peak(&r->peak, sum);
	if (spins)
		note_spins(p, spins);
	return 0;

refuse:
	atomic_fetch_add_explicit(&r->oom, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->oom, 1, memory_order_relaxed);
	return -ENOMEM;
}

void cnl_region_unreserve(struct cnl_region *r, int slot, uint64_t bytes)
{
	struct cnl_region_proc *p;
	uint64_t old;

	if (!r || slot < 0 || slot >= CNL_REGION_PROCS || !bytes)
		return;
	p = &r->procs[slot];
	/* No loop: giving back more than held puts the excess back, so the
	 * slot ends at what the other threads added (clamped at zero). */
	old = atomic_fetch_sub(&p->used, bytes);
	if (old < bytes)
		atomic_fetch_add(&p->used, bytes - old);
}

uint64_t cnl_region_used(struct cnl_region *r, int own_slot)
{
	if (!r)
		return 0;
	reap_due(r);
	if (own_slot < 0 || own_slot >= CNL_REGION_PROCS)
		return sum_slots(r, -1, 0);
	return sum_slots(r, own_slot, atomic_load(&r->procs[own_slot].used));
}

/* Whether another process holds slot i's byte lock (F_GETLK changes
 * nothing and never waits).  An error counts as alive: never hide use. */
static int slot_held(int fd, int i)
{
	struct flock fl = {
	    .l_type = F_WRLCK,
	    .l_whence = SEEK_SET,
	    .l_start = CNL_REGION_LOCK_BASE + i,
	    .l_len = 1,
	};

	if (fcntl(fd, F_GETLK, &fl) < 0)
		return 1;
	return fl.l_type != F_UNLCK;
}

/*
 * The agent's view.  It reads a copy of the accounting file (pread), not
 * the mapping: the tenant owns that file and may truncate it, and a
 * mapping past the end of a file raises SIGBUS in whoever reads it — the
 * agent must not be killable that way.  Liveness is each slot's byte lock
 * (invariant 2), tested without taking it, so a dead process stops
 * counting here at once, reaped or not, and stat writes nothing.
 */
int cnl_region_stat(struct cnl_region *r, struct cnl_region_stat *ret)
{
	struct cnl_region *c = NULL;
	const struct cnl_region *src = r;
	struct mapped *m;
	uint64_t own = 0, mask;
	unsigned n = 0;
	int fd = -1;

	if (!r || !ret)
		return -EINVAL;
	pthread_mutex_lock(&maps_lock);
	if ((m = find_locked(r))) {
		fd = m->fd;
		own = owned_locked(m);
	}
	pthread_mutex_unlock(&maps_lock);
	if (fd >= 0) {
		ssize_t got;

		c = calloc(1, sizeof(*c));
		if (!c)
			return -ENOMEM;
		got = pread(fd, (char *)c + ACCT_OFF, ACCT_SIZE, 0);
		if (got < 0) {
			free(c);
			return -errno;
		}
		src = c; /* a short file reads as zeros past its end */
	}
	memset(ret, 0, sizeof(*ret));
	ret->quota = atomic_load(&r->quota);
	ret->peak = atomic_load(&src->peak);
	ret->oom = atomic_load(&src->oom);
	ret->reaped = atomic_load(&src->reaped);
	mask = atomic_load(&src->live);
	for (int i = 0; i < CNL_REGION_PROCS; i++) {
		const struct cnl_region_proc *p = &src->procs[i];
		uint64_t spins = atomic_load(&p->spins);
		int alive = fd < 0 || (own & (1ULL << i)) || slot_held(fd, i);

		if (!alive)
			continue;
		if (mask & (1ULL << i))
			ret->used = sat_add(ret->used, atomic_load(&p->used));
		if (atomic_load(&p->state) != CNL_PROC_LIVE)
			continue;
		if (spins > ret->spins)
			ret->spins = spins;
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
	free(c);
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
	int n = 0;

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
	/* Bounded: the bucket is in the tenant-writable file. */
	while (t > (int64_t)burst_ns && n++ < CNL_REGION_SPINS &&
	       !atomic_compare_exchange_weak(&b->tokens, &t, (int64_t)burst_ns))
		;
}

void cnl_bucket_charge(struct cnl_bucket *b, int64_t ns, uint64_t burst_ns)
{
	/* Debt is bounded so that one huge kernel cannot starve for ever. */
	int64_t floor = -(int64_t)depth(burst_ns) * 50;
	int64_t t = atomic_fetch_sub(&b->tokens, ns) - ns;
	int n = 0;

	while (t < floor && n++ < CNL_REGION_SPINS &&
	       !atomic_compare_exchange_weak(&b->tokens, &t, floor))
		;
}
