/*
 * gpu_audit.c - the GPU memory audit thread (gpu_audit.h says what it
 * does and why; agent-internal.h where it sits among the agent's files).
 *
 * One round:
 *
 *   1. NVML: (pid, GPU, bytes) for every compute process (cnl_gpus_procs,
 *      on the audit's own NVML handle);
 *   2. the table, under the lock: each workload, copied out (id, epoch,
 *      quota: its slice's; 0 without a GPU or with 0 blocks; none for
 *      whole GPUs);
 *      nothing else is done under the lock;
 *   3. each workload's pids from its cgroup, without the lock; a pid of
 *      NVML's list that is in one of them is that slice's; one that is in
 *      none is logged once (the operator's process, or one that died);
 *   4. per slice over its quota + one granule, the victims
 *      (cnl_gpu_audit_pick), each SIGKILLed through a pidfd taken before
 *      its cgroup is checked again, so a pid reused in between is never
 *      hit;
 *   5. under the lock, the workload's end reason (the first kill's); then
 *      each kill to cnlabd, kept and sent again next round while cnlabd
 *      does not take it (at most KILLS_MAX waiting; 404/409: not ours any
 *      more, dropped).
 *
 * The round's sleep is cut in 100 ms steps so that stop is prompt.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "agent/gpu_audit.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#define PROCS_MAX   4096 /* NVML entries read per round */
#define PIDS_MAX    4096 /* pids of one workload's cgroup */
#define KILLS_MAX   64   /* kill records waiting for cnlabd */
#define FOREIGN_MAX 64   /* foreign pids already logged */

/* ---- the decision (pure) ------------------------------------------------- */

int cnl_gpu_audit_pick(const struct cnl_audit_proc *procs, int n,
                       uint64_t quota, uint64_t granule, int *ret_idx)
{
	uint64_t total = 0;
	int k = 0;

	if (quota == CNL_GPU_AUDIT_NO_QUOTA || n <= 0)
		return 0;
	for (int i = 0; i < n; i++)
		if (procs[i].used != CNL_GPU_USED_UNKNOWN)
			total += procs[i].used;
	if (total <= quota || total - quota <= granule)
		return 0;
	while (total > quota) {
		int best = -1;

		for (int i = 0; i < n; i++) {
			bool taken = false;

			if (procs[i].used == CNL_GPU_USED_UNKNOWN ||
			    procs[i].used == 0)
				continue;
			for (int j = 0; j < k && !taken; j++)
				taken = ret_idx[j] == i;
			if (taken)
				continue;
			if (best < 0 || procs[i].used > procs[best].used ||
			    (procs[i].used == procs[best].used &&
			     procs[i].pid < procs[best].pid))
				best = i;
		}
		if (best < 0)
			break;
		ret_idx[k++] = best;
		total -= procs[best].used;
	}
	return k;
}

/* "4 GiB", "4.1 GiB", "512 MiB"; @near (a quota's words that must not
 * read alike): three decimals where one would. */
static void bytes_words(uint64_t b, uint64_t near, char *buf, size_t len)
{
	const double gib = (double)(1ULL << 30);

	if (b >= 1ULL << 30 && b % (1ULL << 30) == 0 && b != near)
		snprintf(buf, len, "%" PRIu64 " GiB", b >> 30);
	else if (b >= 1ULL << 30 &&
	         (int64_t)((double)b / gib * 10 + 0.5) ==
	             (int64_t)((double)near / gib * 10 + 0.5))
		snprintf(buf, len, "%.3f GiB", (double)b / gib);
	else if (b >= 1ULL << 30)
		snprintf(buf, len, "%.1f GiB", (double)b / gib);
	else
		snprintf(buf, len, "%" PRIu64 " MiB",
		         (b + (UINT64_C(1) << 19)) >> 20);
}

void cnl_gpu_audit_reason(uint64_t used, uint64_t quota, int pid, char *buf,
                          size_t len)
{
	char u[32], q[32];

	bytes_words(used, quota, u, sizeof(u));
	bytes_words(quota, 0, q, sizeof(q));
	if (quota == 0) {
		snprintf(
		    buf, len,
		    "killed: used %s of GPU memory without a GPU slice (GPU "
		    "memory audit, pid %d)",
		    u, pid);
		return;
	}
	snprintf(buf, len,
	         "killed: used %s of GPU memory, quota %s (GPU memory audit, "
	         "pid %d)",
	         u, q, pid);
}

/* ---- the thread ---------------------------------------------------------- */

/* A workload, copied out of the table. */
struct slice {
	char id[CNL_WIRE_ID_MAX];
	int64_t epoch;
	uint64_t quota;    /* CNL_GPU_AUDIT_NO_QUOTA: whole GPUs; 0: no GPU */
	int64_t shrink_to; /* a shrink in flight, or -1 */
	struct cnl_audit_proc *procs;
	int *gpu; /* the GPU of each of procs (the first it was seen on) */
	int n;
};

struct audit {
	struct cnl_agent *a;
	struct cnl_gpu_proc *gp;
	pid_t *pids;
	struct cnl_wire_gpu_kill kills[KILLS_MAX];
	int n_kills;
	int foreign[FOREIGN_MAX]; /* a ring */
	unsigned n_foreign;
	bool nvml_failed; /* logged once until it works again */
};

static bool in_list(const pid_t *p, int n, int pid)
{
	for (int i = 0; i < n; i++)
		if (p[i] == pid)
			return true;
	return false;
}

/* Log a process that holds GPU memory and is of no workload, once. */
static void foreign(struct audit *au, const struct cnl_gpu_proc *p)
{
	for (unsigned i = 0; i < au->n_foreign && i < FOREIGN_MAX; i++)
		if (au->foreign[i] == p->pid)
			return;
	au->foreign[au->n_foreign++ % FOREIGN_MAX] = p->pid;
	cnl_log(CNL_LOG_INFO,
	        "GPU memory audit: a process of no workload uses a GPU (the "
	        "operator's; not killed)",
	        "pid=%d gpu=%d used=%" PRIu64, p->pid, p->gpu,
	        p->used == CNL_GPU_USED_UNKNOWN ? 0 : p->used);
}

/*
 * SIGKILL @pid if it is still in workload @id's cgroup: the pidfd pins the
 * process, so the check and the signal are about the same one.  0, or
 * -ESRCH when it is gone or no longer the workload's.
 */
static int kill_in(struct cnl_agent *a, const char *id, int pid, pid_t *buf)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), n, r = 0;

	if (fd < 0 && errno != ENOSYS)
		return -ESRCH;
	n = cnl_launcher_procs(a->launcher, id, buf, PIDS_MAX);
	if (n < 0 || !in_list(buf, n < PIDS_MAX ? n : PIDS_MAX, pid))
		r = -ESRCH;
	else if (fd >= 0)
		r = syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) < 0
		        ? -errno
		        : 0;
	else /* a kernel without pidfds (before 5.3) */
		r = kill(pid, SIGKILL) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	return r;
}

/* Count a kill record of workload @id (@epoch) waiting for cnlabd (@d
 * +1) or gone (-1).  Takes the lock. */
static void unsent_id(struct cnl_agent *a, const char *id, int64_t epoch, int d)
{
	struct wk *w;

	pthread_mutex_lock(&a->mu);
	if ((w = cnl_agent_wk_find(a, id)) && w->epoch == epoch &&
	    w->gpu_kills_unsent + d >= 0)
		w->gpu_kills_unsent += d;
	pthread_mutex_unlock(&a->mu);
	if (d < 0)
		cnl_agent_wake(a); /* its end may wait for this one */
}

static void unsent(struct cnl_agent *a, const struct slice *s, int d)
{
	unsent_id(a, s->id, s->epoch, d);
}

/* Kill what @s must lose; note each kill.  Without the lock. */
/*
 * A slice shrinking in flight is held to its larger quota until its use,
 * as the driver reports it, is within the smaller one; from then on to the
 * smaller.  A use NVML cannot tell keeps the larger.
 */
bool cnl_gpu_audit_shrunk(const struct cnl_audit_proc *procs, int n,
                          uint64_t shrink_to)
{
	uint64_t used = 0;

	for (int k = 0; k < n; k++) {
		if (procs[k].used == CNL_GPU_USED_UNKNOWN ||
		    procs[k].used > shrink_to - used)
			return false;
		used += procs[k].used;
	}
	return true;
}

static void shrink_settle(struct cnl_agent *a, const struct slice *s)
{
	struct wk *w;

	if (!cnl_gpu_audit_shrunk(s->procs, s->n, (uint64_t)s->shrink_to))
		return;
	pthread_mutex_lock(&a->mu);
	w = cnl_agent_wk_find(a, s->id);
	if (w && w->epoch == s->epoch && w->vram_shrink_to == s->shrink_to) {
		w->vram_bytes = w->vram_shrink_to;
		w->vram_shrink_to = -1;
	}
	pthread_mutex_unlock(&a->mu);
}

static void enforce(struct audit *au, struct slice *s)
{
	struct cnl_agent *a = au->a;
	int idx[PROCS_MAX], k;
	uint64_t used = 0;

	for (int i = 0; i < s->n; i++)
		if (s->procs[i].used != CNL_GPU_USED_UNKNOWN)
			used += s->procs[i].used;
	k = cnl_gpu_audit_pick(s->procs, s->n, s->quota, CNL_GPU_AUDIT_GRANULE,
	                       idx);
	for (int j = 0; j < k; j++) {
		const struct cnl_audit_proc *p = &s->procs[idx[j]];
		char why[CNL_WIRE_MESSAGE_MAX];
		bool queued = au->n_kills < KILLS_MAX;
		struct wk *w;
		int r;

		/* Its end waits for the record: noted before the signal,
		 * which the supervisor may see at once. */
		if (queued)
			unsent(a, s, +1);
		if ((r = kill_in(a, s->id, p->pid, au->pids)) < 0) {
			if (queued)
				unsent(a, s, -1);
			cnl_log(
			    CNL_LOG_INFO,
			    "GPU memory audit: process gone before its kill",
			    "id=%s pid=%d", s->id, p->pid);
			continue;
		}
		cnl_gpu_audit_reason(used, s->quota, p->pid, why, sizeof(why));
		cnl_log(
		    CNL_LOG_WARN,
		    "GPU memory audit: killed a process of a slice over its "
		    "quota",
		    "node=%s id=%s epoch=%" PRId64 " pid=%d gpu=%d "
		    "pid_used=%" PRIu64 " used=%" PRIu64 " quota=%" PRIu64,
		    a->cfg.name, s->id, s->epoch, p->pid, s->gpu[idx[j]],
		    p->used, used, s->quota);
		atomic_fetch_add(&a->audit_kills_total, 1);
		pthread_mutex_lock(&a->mu);
		w = cnl_agent_wk_find(a, s->id);
		if (w && w->epoch == s->epoch && !w->gpu_kill[0]) {
			snprintf(w->gpu_kill, sizeof(w->gpu_kill), "%s", why);
			/* A restarted agent still reports the end so. */
			cnl_agent_state_save(a, w);
		}
		pthread_mutex_unlock(&a->mu);
		if (queued) {
			struct cnl_wire_gpu_kill *m = &au->kills[au->n_kills++];

			memset(m, 0, sizeof(*m));
			snprintf(m->id, sizeof(m->id), "%s", s->id);
			m->epoch = s->epoch;
			m->pid = p->pid;
			m->gpu = s->gpu[idx[j]];
			m->used = (int64_t)used;
			m->pid_used = (int64_t)p->used;
			m->quota = (int64_t)s->quota;
		} else {
			cnl_log(CNL_LOG_WARN,
			        "GPU memory audit: too many kills waiting for "
			        "cnlabd; this one is only in the node's log",
			        "id=%s pid=%d", s->id, p->pid);
		}
	}
}

/* Send the waiting kill records; keep those cnlabd did not take. */
static void send_kills(struct audit *au)
{
	struct cnl_agent *a = au->a;
	char route[256], err[256], q[300];
	int keep = 0;

	snprintf(route, sizeof(route), "/v1/nodes/%s/gpu-kills", a->node_id);
	for (int i = 0; i < au->n_kills; i++) {
		json_t *body = cnl_wire_gpu_kill_encode(&au->kills[i]);
		long st = body ? cnl_client_call(a->aud_cl, "POST", route, body,
		                                 30, NULL, err, sizeof(err))
		               : -ENOMEM;

		json_decref(body);
		if (st == 201 || st == 200 || st == 404 || st == 409 ||
		    st == 400) {
			unsent_id(a, au->kills[i].id, au->kills[i].epoch, -1);
			if (st != 201 && st != 200)
				cnl_log(CNL_LOG_WARN,
				        "GPU memory audit: cnlabd refused a "
				        "kill record",
				        "id=%s pid=%d status=%ld err=%s",
				        au->kills[i].id, au->kills[i].pid, st,
				        cnl_log_quote(q, sizeof(q), err));
			continue;
		}
		au->kills[keep++] = au->kills[i];
	}
	au->n_kills = keep;
}

static void slices_free(struct slice *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(s[i].procs);
		free(s[i].gpu);
	}
	free(s);
}

static void round_once(struct audit *au)
{
	struct cnl_agent *a = au->a;
	struct slice *s = NULL;
	size_t ns = 0;
	bool *mine;
	int n;

	n = cnl_gpus_procs(a->audit_gpus, au->gp, PROCS_MAX);
	if (n < 0) {
		if (!au->nvml_failed)
			cnl_log(CNL_LOG_WARN,
			        "GPU memory audit: cannot read the GPUs' "
			        "processes",
			        "err=%s", cnl_errname(n));
		au->nvml_failed = true;
		return;
	}
	au->nvml_failed = false;
	if (n > PROCS_MAX)
		n = PROCS_MAX;
	if (n == 0)
		return;
	/* The slices, copied out under the lock. */
	pthread_mutex_lock(&a->mu);
	s = cnl_xcalloc(a->n_wk ? a->n_wk : 1, sizeof(*s));
	for (size_t i = 0; i < a->n_wk; i++) {
		const struct wk *w = a->wk[i];

		if (!w->w || w->gone)
			continue;
		snprintf(s[ns].id, sizeof(s[ns].id), "%s", w->id);
		s[ns].epoch = w->epoch;
		s[ns].quota = w->vram_bytes < 0 ? CNL_GPU_AUDIT_NO_QUOTA
		                                : (uint64_t)w->vram_bytes;
		s[ns].shrink_to = w->vram_shrink_to;
		ns++;
	}
	pthread_mutex_unlock(&a->mu);
	/* Each NVML process to its slice, by the slice's cgroup. */
	mine = cnl_xcalloc((size_t)n, sizeof(*mine));
	for (size_t i = 0; i < ns; i++) {
		int np = cnl_launcher_procs(a->launcher, s[i].id, au->pids,
		                            PIDS_MAX);

		if (np <= 0)
			continue;
		if (np > PIDS_MAX)
			np = PIDS_MAX;
		for (int j = 0; j < n; j++) {
			struct slice *sl = &s[i];
			int k;

			if (mine[j] || !in_list(au->pids, np, au->gp[j].pid))
				continue;
			mine[j] = true;
			/* One pid on several GPUs: its bytes together. */
			for (k = 0; k < sl->n; k++)
				if (sl->procs[k].pid == au->gp[j].pid)
					break;
			if (k == sl->n) {
				sl->procs = cnl_xrealloc(
				    sl->procs,
				    (size_t)(sl->n + 1) * sizeof(*sl->procs));
				sl->gpu = cnl_xrealloc(
				    sl->gpu, (size_t)(sl->n + 1) * sizeof(int));
				sl->procs[k].pid = au->gp[j].pid;
				sl->procs[k].used = 0;
				sl->gpu[k] = au->gp[j].gpu;
				sl->n++;
			}
			if (au->gp[j].used == CNL_GPU_USED_UNKNOWN)
				continue;
			if (sl->procs[k].used == CNL_GPU_USED_UNKNOWN)
				sl->procs[k].used = 0;
			sl->procs[k].used += au->gp[j].used;
		}
	}
	for (int j = 0; j < n; j++)
		if (!mine[j])
			foreign(au, &au->gp[j]);
	free(mine);
	for (size_t i = 0; i < ns; i++)
		if (s[i].quota != CNL_GPU_AUDIT_NO_QUOTA && s[i].n)
			enforce(au, &s[i]);
	for (size_t i = 0; i < ns; i++)
		if (s[i].shrink_to >= 0)
			shrink_settle(a, &s[i]);
	slices_free(s, ns);
}

void *cnl_agent_gpu_audit(void *arg)
{
	struct cnl_agent *a = arg;
	struct audit *au = cnl_xcalloc(1, sizeof(*au));
	int64_t next = cnl_time_now_ms();

	au->a = a;
	au->gp = cnl_xcalloc(PROCS_MAX, sizeof(*au->gp));
	au->pids = cnl_xcalloc(PIDS_MAX, sizeof(*au->pids));
	cnl_log(CNL_LOG_INFO, "GPU memory audit on", "interval_ms=%" PRId64,
	        a->cfg.gpu_audit_ms);
	while (!a->stop) {
		if (cnl_time_now_ms() < next) {
			usleep(100 * 1000);
			continue;
		}
		next = cnl_time_now_ms() + a->cfg.gpu_audit_ms;
		round_once(au);
		if (au->n_kills)
			send_kills(au);
	}
	free(au->gp);
	free(au->pids);
	free(au);
	return NULL;
}
