/*
 * sqlite_walbuf.c - a VFS over SQLite's default one ("cnl-walbuf") that
 * writes each commit's WAL frames with one system call instead of two per
 * frame.
 *
 * SQLite appends a frame to the WAL as two writes: its 24-byte header,
 * then the page.  A submission's commit is about six frames (the job's
 * row, its index entries, its audit records), so twelve pwrite() calls,
 * which were a third of a submission's system calls; each costs several
 * microseconds on a virtual machine.  This VFS gives the writer's WAL a
 * buffer: writes that follow one another in the file are appended to it,
 * and it is written out with one pwrite() when the commit's last frame is
 * complete, and before anything else touches the file.
 *
 * Why readers never see a frame still in the buffer (the invariant):
 *  1. A commit becomes visible to other connections when the writer
 *     updates the wal-index, after it wrote all of the commit's frames.
 *     The last frame of a commit is the only one whose header carries the
 *     database size after the commit (bytes 4-7, non-zero); once the page
 *     that follows such a header is appended, the buffer is written out,
 *     inside that xWrite: its failure is the commit's, which SQLite rolls
 *     back.  So every committed frame is in the file before any reader
 *     can know of it.
 *  2. Frames of a transaction not yet committed (a spill of a large one)
 *     are read only by the writer itself, through this file: every method
 *     but the two that only describe the device writes the buffer out
 *     first (a read, a sync, a truncate, a size, a file control, a close).
 *  3. A write that does not follow the buffered ones (SQLite rewriting a
 *     frame of the current transaction, or restarting the WAL at offset
 *     0) writes the buffer out first: the file sees the writes in the
 *     order SQLite made them.
 * Any pattern this file does not expect therefore costs at most one more
 * write, never a reader's view: the buffer is written at the latest at
 * the commit frame, which SQLite always writes last.
 *
 * Only the file opened as a WAL is buffered; the database, journals and
 * temporary files are the default VFS's own, methods and all.  Only the
 * read-write connection uses this VFS; readers and the syncer's
 * checkpointer open the database through the default one.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite-internal.h"

/* Written out before it would hold more than this (a large transaction).
 * The default VFS writes at most 128 KiB - 1 per call (unix_write masks
 * the length: a longer write comes out short, as a full disk's); 64 KiB
 * holds a commit of a dozen 4 KiB frames, or one frame of the largest
 * page. */
#define WALBUF_MAX (64 * 1024)
#define FRAME_HDR  24

struct walbuf_file {
	sqlite3_file base;  /* pMethods: &walbuf_methods, or the real ones */
	sqlite3_file *real; /* the default VFS's file, just after this */
	unsigned char *buf; /* buffered bytes, to go at offset @off */
	size_t len, cap;
	sqlite3_int64 off;
	bool commit_hdr; /* the last write was a commit frame's header */
};

static sqlite3_vfs walbuf_vfs;
static sqlite3_vfs *real_vfs;
static pthread_once_t walbuf_once = PTHREAD_ONCE_INIT;
static int walbuf_rc = SQLITE_ERROR;

static int flush(struct walbuf_file *f)
{
	int rc;

	if (!f->len)
		return SQLITE_OK;
	rc = f->real->pMethods->xWrite(f->real, f->buf, (int)f->len, f->off);
	f->len = 0;
	return rc;
}

static int wb_close(sqlite3_file *file)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	int rc = flush(f), rc2 = f->real->pMethods->xClose(f->real);

	free(f->buf);
	f->buf = NULL;
	f->cap = 0;
	return rc != SQLITE_OK ? rc : rc2;
}

static int wb_read(sqlite3_file *file, void *p, int n, sqlite3_int64 off)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	int rc = flush(f);

	return rc != SQLITE_OK ? rc
	                       : f->real->pMethods->xRead(f->real, p, n, off);
}

static bool append(struct walbuf_file *f, const void *p, size_t n)
{
	if (f->len + n > f->cap) {
		size_t cap = f->cap ? f->cap : WALBUF_MAX;
		unsigned char *b;

		while (cap < f->len + n)
			cap *= 2;
		if (!(b = realloc(f->buf, cap)))
			return false;
		f->buf = b;
		f->cap = cap;
	}
	memcpy(f->buf + f->len, p, n);
	f->len += n;
	return true;
}

static int wb_write(sqlite3_file *file, const void *p, int n, sqlite3_int64 off)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	bool commit = f->commit_hdr;
	int rc;

	f->commit_hdr = false;
	/* Not after what is buffered, or too much: write that out first. */
	if (f->len && (off != f->off + (sqlite3_int64)f->len ||
	               f->len + (size_t)n > WALBUF_MAX)) {
		if ((rc = flush(f)) != SQLITE_OK)
			return rc;
	}
	if (n <= 0 || (size_t)n > WALBUF_MAX)
		return f->real->pMethods->xWrite(f->real, p, n, off);
	if (!f->len)
		f->off = off;
	if (!append(f, p, (size_t)n)) {
		if ((rc = flush(f)) != SQLITE_OK)
			return rc;
		return f->real->pMethods->xWrite(f->real, p, n, off);
	}
	/* A frame header whose "database size after commit" is set: the
	 * page that follows ends the commit (invariant 1). */
	if (n == FRAME_HDR) {
		const unsigned char *h = p;

		f->commit_hdr = (h[4] | h[5] | h[6] | h[7]) != 0;
		return SQLITE_OK;
	}
	return commit ? flush(f) : SQLITE_OK;
}

static int wb_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	int rc = flush(f);

	return rc != SQLITE_OK ? rc
	                       : f->real->pMethods->xTruncate(f->real, size);
}

static int wb_sync(sqlite3_file *file, int flags)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	int rc = flush(f);

	return rc != SQLITE_OK ? rc : f->real->pMethods->xSync(f->real, flags);
}

static int wb_file_size(sqlite3_file *file, sqlite3_int64 *ret)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	int rc = flush(f);

	return rc != SQLITE_OK ? rc
	                       : f->real->pMethods->xFileSize(f->real, ret);
}

static int wb_lock(sqlite3_file *file, int lock)
{
	struct walbuf_file *f = (struct walbuf_file *)file;

	return f->real->pMethods->xLock(f->real, lock);
}

static int wb_unlock(sqlite3_file *file, int lock)
{
	struct walbuf_file *f = (struct walbuf_file *)file;

	return f->real->pMethods->xUnlock(f->real, lock);
}

static int wb_check_reserved(sqlite3_file *file, int *ret)
{
	struct walbuf_file *f = (struct walbuf_file *)file;

	return f->real->pMethods->xCheckReservedLock(f->real, ret);
}

static int wb_file_control(sqlite3_file *file, int op, void *arg)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	int rc = flush(f);

	return rc != SQLITE_OK
	           ? rc
	           : f->real->pMethods->xFileControl(f->real, op, arg);
}

static int wb_sector_size(sqlite3_file *file)
{
	struct walbuf_file *f = (struct walbuf_file *)file;

	return f->real->pMethods->xSectorSize(f->real);
}

static int wb_device(sqlite3_file *file)
{
	struct walbuf_file *f = (struct walbuf_file *)file;

	return f->real->pMethods->xDeviceCharacteristics(f->real);
}

/* Version 1: a WAL has no shared memory and is never memory-mapped. */
static const sqlite3_io_methods walbuf_methods = {
    .iVersion = 1,
    .xClose = wb_close,
    .xRead = wb_read,
    .xWrite = wb_write,
    .xTruncate = wb_truncate,
    .xSync = wb_sync,
    .xFileSize = wb_file_size,
    .xLock = wb_lock,
    .xUnlock = wb_unlock,
    .xCheckReservedLock = wb_check_reserved,
    .xFileControl = wb_file_control,
    .xSectorSize = wb_sector_size,
    .xDeviceCharacteristics = wb_device,
};

/* The real file lives just after ours, in the block SQLite allocated
 * (szOsFile covers both). */
static size_t real_at(void)
{
	return (sizeof(struct walbuf_file) + 15) & ~(size_t)15;
}

static int wb_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file,
                   int flags, int *ret_flags)
{
	struct walbuf_file *f = (struct walbuf_file *)file;
	sqlite3_file *real = (sqlite3_file *)((char *)file + real_at());
	int rc;

	(void)vfs;
	if (!(flags & SQLITE_OPEN_WAL))
		/* Not a WAL: the default VFS's file, in place. */
		return real_vfs->xOpen(real_vfs, name, file, flags, ret_flags);
	memset(f, 0, sizeof(*f));
	f->real = real;
	rc = real_vfs->xOpen(real_vfs, name, real, flags, ret_flags);
	/* No methods: SQLite then does not call xClose on a failed open. */
	f->base.pMethods =
	    rc == SQLITE_OK && real->pMethods ? &walbuf_methods : NULL;
	return rc;
}

static int wb_delete(sqlite3_vfs *v, const char *name, int sync)
{
	(void)v;
	return real_vfs->xDelete(real_vfs, name, sync);
}

static int wb_access(sqlite3_vfs *v, const char *name, int flags, int *ret)
{
	(void)v;
	return real_vfs->xAccess(real_vfs, name, flags, ret);
}

static int wb_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out)
{
	(void)v;
	return real_vfs->xFullPathname(real_vfs, name, n, out);
}

static int wb_randomness(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return real_vfs->xRandomness(real_vfs, n, out);
}

static int wb_sleep(sqlite3_vfs *v, int us)
{
	(void)v;
	return real_vfs->xSleep(real_vfs, us);
}

static int wb_current_time(sqlite3_vfs *v, double *ret)
{
	(void)v;
	return real_vfs->xCurrentTime(real_vfs, ret);
}

static int wb_last_error(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return real_vfs->xGetLastError
	           ? real_vfs->xGetLastError(real_vfs, n, out)
	           : 0;
}

static int wb_current_time64(sqlite3_vfs *v, sqlite3_int64 *ret)
{
	(void)v;
	return real_vfs->xCurrentTimeInt64(real_vfs, ret);
}

static void *wb_dl_open(sqlite3_vfs *v, const char *name)
{
	(void)v;
	return real_vfs->xDlOpen(real_vfs, name);
}

static void wb_dl_error(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	real_vfs->xDlError(real_vfs, n, out);
}

static void (*wb_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
	(void)v;
	return real_vfs->xDlSym(real_vfs, h, sym);
}

static void wb_dl_close(sqlite3_vfs *v, void *h)
{
	(void)v;
	real_vfs->xDlClose(real_vfs, h);
}

static void walbuf_register(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	if (!real_vfs || real_vfs->iVersion < 2 ||
	    !real_vfs->xCurrentTimeInt64 || !real_vfs->xDlOpen)
		return;
	walbuf_vfs = (sqlite3_vfs){
	    .iVersion = 2,
	    .szOsFile = (int)real_at() + real_vfs->szOsFile,
	    .mxPathname = real_vfs->mxPathname,
	    .zName = "cnl-walbuf",
	    .xOpen = wb_open,
	    .xDelete = wb_delete,
	    .xAccess = wb_access,
	    .xFullPathname = wb_full_pathname,
	    .xDlOpen = wb_dl_open,
	    .xDlError = wb_dl_error,
	    .xDlSym = wb_dl_sym,
	    .xDlClose = wb_dl_close,
	    .xRandomness = wb_randomness,
	    .xSleep = wb_sleep,
	    .xCurrentTime = wb_current_time,
	    .xGetLastError = wb_last_error,
	    .xCurrentTimeInt64 = wb_current_time64,
	};
	walbuf_rc = sqlite3_vfs_register(&walbuf_vfs, 0);
}

const char *cnl_sq_walbuf_vfs(void)
{
	pthread_once(&walbuf_once, walbuf_register);
	return walbuf_rc == SQLITE_OK ? walbuf_vfs.zName : NULL;
}
