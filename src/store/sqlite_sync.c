/*
 * sqlite_sync.c - group commit for the SQLite backend (store.h,
 * cnl_store_group_commit()): commits that only write, and a syncer that
 * makes them durable in batches.
 *
 * Under group commit the connection runs synchronous=NORMAL: a commit
 * appends its frames to the WAL and returns without syncing.  SQLite then
 * calls the WAL hook (on_wal), after the frames are written and the write
 * lock released; the hook bumps the handle's written count.  The syncer
 * thread (the caller of cnl_sq_sync(), outside every lock) reads that count
 * first, then fdatasyncs the WAL file through a descriptor of its own:
 * every commit counted before the read had its frames in the file before
 * the sync began, so the sync covers them all, and the count it read is
 * what it may publish as durable.
 *
 * What keeps that true:
 *  1. The WAL is never deleted while the process runs
 *     (SQLITE_FCNTL_PERSIST_WAL on both connections): SQLite restarts it
 *     from its start after a complete checkpoint, in the same file, which
 *     the descriptor still names.  Should the file under that name change
 *     anyway (its device and inode differ from the descriptor's), the
 *     syncer opens the new one; the old one's frames were checkpointed
 *     into the database, and the database synced, before it went.  A
 *     missing WAL likewise means everything is in the synced database.
 *  2. Checkpoints, which sync the database file, run on the syncer's own
 *     connection (PASSIVE: they never block the writer), once the WAL
 *     holds CKPT_FRAMES frames.  The hook replaces SQLite's automatic
 *     checkpoint, which would run inside the writer's commit, under the
 *     caller's lock; only should the WAL reach CKPT_INLINE_FRAMES (the
 *     syncer's checkpoints never catching up with a writer that never
 *     pauses) does the writer checkpoint itself, so that the WAL restarts.
 *     Under a steady stream of submissions that is the rule, not the
 *     exception: a passive checkpoint ends after frames were appended, so
 *     the WAL restarts only after the writer's.  CKPT_INLINE_FRAMES is
 *     therefore small (16 MiB of WAL, one wal-index hash table): the
 *     writer's checkpoint then copies only what the syncer's left (one
 *     sync of each file every few hundred submissions), each commit
 *     writes over pages of the WAL already cached instead of growing the
 *     file (at 64,000 frames it grew to 256 MiB, every frame a new page
 *     of the page cache, and every page lookup went through 16 hash
 *     tables), and a restart has little WAL to read.
 *  3. A crash loses only commits no sync covered, each whole: SQLite's
 *     recovery replays the WAL up to the last complete commit frame.
 *  4. Lock-free readers on other connections (cnl_store_seen()): SQLite
 *     makes a commit visible to them before it calls the WAL hook, so a
 *     reader that counted @written after its reads could have seen a
 *     commit not yet counted, and answer before it is durable.  The commit
 *     hook (on_commit) counts @seen before the commit is made; the WAL
 *     hook sets @written to it; and since a commit may write no frame (no
 *     WAL hook) or fail, the writer settles @written up to @seen after
 *     each statement (cnl_sq_settle(), from cnl_sq_finalize() and the
 *     sqlite3_exec() calls): a commit counted that wrote nothing costs
 *     the syncer nothing it would not have done.
 *  5. A failed sync publishes nothing; the caller fails whoever waited on
 *     it.  In test builds (CNL_TEST_HOOKS) a sync fails with -EIO while
 *     the file named by CNLAB_TEST_SYNC_FAULT exists, which is how the
 *     fault test makes a disk fail and recover.
 *  5. A commit itself can fail (SQLITE_FULL, SQLITE_IOERR writing the
 *     WAL): SQLite then rolls the transaction back and nothing of it is
 *     written.  In test builds the file named by CNLAB_TEST_COMMIT_FAULT,
 *     when it exists at an outermost COMMIT, is removed and that commit
 *     fails as a full disk's would (sqlite_db.c, commit_fault()): one commit
 *     per file created, so a test can aim it at one request.  Likewise
 *     CNLAB_TEST_BATCH_FAULT at the COMMIT of a batch (sqlite_db.c,
 *     "Batches"): the whole batch is lost, as a full disk would lose it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/sqlite-internal.h"

#define CKPT_FRAMES        1000
#define CKPT_INLINE_FRAMES 4096

static int on_wal(void *ud, sqlite3 *db, const char *name, int frames)
{
	struct cnl_sq_store *q = ud;

	atomic_store_explicit(&q->wal_frames, frames, memory_order_relaxed);
	cnl_sq_settle(q);
	if (frames >= CKPT_INLINE_FRAMES)
		sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE,
		                          NULL, NULL);
	return SQLITE_OK;
}

/* Before a commit is made (and seen by readers): count it (invariant 4). */
static int on_commit(void *ud)
{
	struct cnl_sq_store *q = ud;

	atomic_fetch_add_explicit(&q->seen, 1, memory_order_seq_cst);
	return 0; /* 0: go on with the commit */
}

static void persist_wal(sqlite3 *db)
{
	int one = 1;

	sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
}

int cnl_sq_group_commit(struct cnl_store *s)
{
	struct cnl_sq_store *q = cnl_sq(s);
	const char *path = q->base.path;
	int r, rc;

	if (q->group)
		return 0;
	if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0 ||
	    !path[0])
		return -ENOTSUP;
	if ((size_t)snprintf(q->wal_path, sizeof(q->wal_path), "%s-wal",
	                     path) >= sizeof(q->wal_path))
		return -ENAMETOOLONG;
	rc = sqlite3_open_v2(path, &q->ckpt, SQLITE_OPEN_READWRITE, NULL);
	if (rc != SQLITE_OK) {
		snprintf(q->base.errmsg, sizeof(q->base.errmsg), "%s",
		         q->ckpt ? sqlite3_errmsg(q->ckpt) : "out of memory");
		sqlite3_close(q->ckpt);
		q->ckpt = NULL;
		return -EIO;
	}
	persist_wal(q->ckpt);
	persist_wal(q->db);
	if ((r = cnl_sq_exec(q, "PRAGMA synchronous=NORMAL")) < 0) {
		sqlite3_close(q->ckpt);
		q->ckpt = NULL;
		return r;
	}
	sqlite3_wal_hook(q->db, on_wal, q);
	sqlite3_commit_hook(q->db, on_commit, q);
#ifdef CNL_TEST_HOOKS
	{
		const char *f = getenv("CNLAB_TEST_SYNC_FAULT");

		if (f)
			snprintf(q->fault, sizeof(q->fault), "%s", f);
		f = getenv("CNLAB_TEST_COMMIT_FAULT");
		if (f)
			snprintf(q->commit_fault, sizeof(q->commit_fault), "%s",
			         f);
		f = getenv("CNLAB_TEST_BATCH_FAULT");
		if (f)
			snprintf(q->batch_fault, sizeof(q->batch_fault), "%s",
			         f);
	}
#endif
	q->group = true;
	return 0;
}

int64_t cnl_sq_written(struct cnl_store *s)
{
	struct cnl_sq_store *q = cnl_sq(s);

	/* An open batch is the next commit ("Batches", invariant 1). */
	return atomic_load_explicit(&q->written, memory_order_acquire) +
	       atomic_load(&q->batch);
}

int cnl_sq_lost(struct cnl_store *s, int64_t seq)
{
	struct cnl_sq_store *q = cnl_sq(s);
	unsigned n = atomic_load(&q->lost_next);

	/* Every answered wait asks: only the entries filled are read (none
	 * until a batch is lost). */
	for (unsigned i = 0; i < n && i < CNL_SQ_LOST; i++)
		if (atomic_load(&q->lost_ring[i]) == seq && seq > 0)
			return atomic_load(&q->lost_ring_err[i]);
	return 0;
}

int64_t cnl_sq_seen(struct cnl_store *s)
{
	return atomic_load_explicit(&cnl_sq(s)->seen, memory_order_seq_cst);
}

/* Point q->wal_fd at the file now named wal_path: 0, 1 when there is no
 * WAL (nothing to sync: invariant 1), or a negative errno. */
static int wal_open(struct cnl_sq_store *q)
{
	struct stat st;
	int fd;

	if (stat(q->wal_path, &st) < 0)
		return errno == ENOENT ? 1 : -errno;
	if (q->wal_fd >= 0 && st.st_dev == q->wal_dev &&
	    st.st_ino == q->wal_ino)
		return 0;
	fd = open(q->wal_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 1 : -errno;
	if (fstat(fd, &st) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	if (q->wal_fd >= 0)
		close(q->wal_fd);
	q->wal_fd = fd;
	q->wal_dev = st.st_dev;
	q->wal_ino = st.st_ino;
	return 0;
}

int cnl_sq_sync(struct cnl_store *s, int64_t *ret_seq)
{
	struct cnl_sq_store *q = cnl_sq(s);
	int64_t w;
	int r;

	if (!q->group)
		return -EINVAL;
	w = atomic_load_explicit(&q->written, memory_order_acquire);
	*ret_seq = w; /* on failure too: what the failure covers */
	if ((r = wal_open(q)) < 0)
		return r;
	if (q->fault[0] && access(q->fault, F_OK) == 0)
		return -EIO;
	if (r == 0 && fdatasync(q->wal_fd) < 0)
		return -errno;
	if (atomic_load_explicit(&q->wal_frames, memory_order_relaxed) >=
	    CKPT_FRAMES) {
		/* Not a durability step: its failure (a busy database)
		 * only leaves the WAL longer until the next one. */
		if (sqlite3_wal_checkpoint_v2(q->ckpt, "main",
		                              SQLITE_CHECKPOINT_PASSIVE, NULL,
		                              NULL) == SQLITE_OK)
			atomic_store_explicit(&q->wal_frames, 0,
			                      memory_order_relaxed);
	}
	return 0;
}

void cnl_sq_sync_close(struct cnl_sq_store *q)
{
	if (q->wal_fd >= 0)
		close(q->wal_fd);
	q->wal_fd = -1;
	sqlite3_close(q->ckpt);
	q->ckpt = NULL;
}
