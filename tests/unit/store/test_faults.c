/*
 * test_faults.c - I/O fault injection into the SQLite store (after
 * SQLite's own test harness): a VFS that wraps the real one and makes the
 * Nth write or sync fail.  For every N until an operation gets through, the
 * test runs the operation once with the fault armed, then reopens the file
 * and checks that the operation took effect completely or not at all and
 * that nothing stored before was lost:
 *
 *   - an idempotent job create (job row + key row, one transaction);
 *   - a job with its input files (job + documents, a caller's transaction
 *     around the store's own: savepoints);
 *   - an audit append (chain link + hash): the chain always verifies;
 *   - a full disk (writes fail with SQLITE_FULL, as SQLite's own VFS says
 *     ENOSPC): the store answers -ENOSPC, not -EIO, and the same handle
 *     takes writes again once there is room, nothing stored before lost.
 *
 * Sizes are small so the walk over every failure point stays quick.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <sqlite3.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "store/store.h"

/* ---- the faulty VFS ------------------------------------------------------ */

static sqlite3_vfs *real;  /* the default VFS we wrap */
static sqlite3_vfs faulty; /* registered as the default */
static int armed;          /* writes and syncs left before the fault */
static int faults;         /* faults injected */
static int write_rc;       /* a write's fault: 0 for SQLITE_IOERR_WRITE */

struct ffile {
	sqlite3_file base;  /* our methods */
	sqlite3_file *real; /* the wrapped file, allocated after us */
};

static bool trip(void)
{
	if (armed > 0 && --armed == 0) {
		faults++;
		return true;
	}
	return false;
}

#define REAL(f) (((struct ffile *)(f))->real)

static int f_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
	return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
	if (trip())
		return write_rc ? write_rc : SQLITE_IOERR_WRITE;
	return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	if (!write_rc && trip()) /* a full disk fails writes only */
		return SQLITE_IOERR_TRUNCATE;
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags)
{
	if (!write_rc && trip())
		return SQLITE_IOERR_FSYNC;
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *s)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), s);
}
static int f_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int f_check(sqlite3_file *f, int *r)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r);
}
static int f_fcntl(sqlite3_file *f, int op, void *a)
{
	return REAL(f)->pMethods->xFileControl(REAL(f), op, a);
}
static int f_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int f_dev(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int f_shmmap(sqlite3_file *f, int pg, int sz, int ext, void volatile **p)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, p);
}
static int f_shmlock(sqlite3_file *f, int o, int n, int fl)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void f_shmbarrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int f_shmunmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static const sqlite3_io_methods methods = {
    .iVersion = 2,
    .xClose = f_close,
    .xRead = f_read,
    .xWrite = f_write,
    .xTruncate = f_truncate,
    .xSync = f_sync,
    .xFileSize = f_size,
    .xLock = f_lock,
    .xUnlock = f_unlock,
    .xCheckReservedLock = f_check,
    .xFileControl = f_fcntl,
    .xSectorSize = f_sector,
    .xDeviceCharacteristics = f_dev,
    .xShmMap = f_shmmap,
    .xShmLock = f_shmlock,
    .xShmBarrier = f_shmbarrier,
    .xShmUnmap = f_shmunmap,
};

static int f_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags,
                  int *out)
{
	struct ffile *ff = (struct ffile *)f;
	int rc;

	ff->real = (sqlite3_file *)(ff + 1);
	rc = real->xOpen(real, name, ff->real, flags, out);
	f->pMethods = rc == SQLITE_OK ? &methods : NULL;
	return rc;
}

static void vfs_install(void)
{
	real = sqlite3_vfs_find(NULL);
	assert_non_null(real);
	faulty = *real;
	faulty.zName = "cnl-faulty";
	faulty.szOsFile = (int)sizeof(struct ffile) + real->szOsFile;
	faulty.xOpen = f_open;
	faulty.pAppData = NULL;
	assert_int_equal(sqlite3_vfs_register(&faulty, 1), SQLITE_OK);
}

/* ---- fixture ------------------------------------------------------------- */

struct fx {
	char dir[64], path[128];
	struct cnl_store *s;
	struct cnl_id_gen g;
	struct cnl_store_project p;
	struct cnl_store_user u;
	int64_t now;
};

static void reopen(struct fx *f)
{
	char err[256];

	cnl_store_close(f->s);
	f->s = NULL;
	armed = 0;
	if (cnl_store_open_sqlite(f->path, &f->s, err, sizeof(err)) < 0)
		fail_msg("reopen: %s", err);
}

static void fx_setup(struct fx *f)
{
	char err[256];

	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/cnl-faults-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/state.db", f->dir);
	cnl_id_gen_init(&f->g, 11);
	f->now = INT64_C(1700000000000);
	assert_int_equal(
	    cnl_store_open_sqlite(f->path, &f->s, err, sizeof(err)), 0);
	assert_true(cnl_id_new(&f->g, "prj", f->now, f->p.id, CNL_ID_MAX) > 0);
	snprintf(f->p.name, sizeof(f->p.name), "vision");
	f->p.created_ms = f->now;
	assert_int_equal(cnl_store_project_create(f->s, &f->p), 0);
	assert_true(cnl_id_new(&f->g, "usr", f->now, f->u.id, CNL_ID_MAX) > 0);
	snprintf(f->u.name, sizeof(f->u.name), "alice");
	f->u.created_ms = f->now;
	assert_int_equal(cnl_store_user_create(f->s, &f->u), 0);
}

static void fx_done(struct fx *f)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	char p[160];

	armed = 0;
	cnl_store_close(f->s);
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s%s", f->path, sfx[i]);
		unlink(p);
	}
	rmdir(f->dir);
}

static void job_template(struct fx *f, struct cnl_store_job *j)
{
	memset(j, 0, sizeof(*j));
	assert_true(cnl_id_new(&f->g, "job", f->now++, j->id, CNL_ID_MAX) > 0);
	memcpy(j->project_id, f->p.id, sizeof(j->project_id));
	memcpy(j->user_id, f->u.id, sizeof(j->user_id));
	snprintf(j->command, sizeof(j->command), "python train.py");
	snprintf(j->gpu_shape, sizeof(j->gpu_shape), "h100-25");
	snprintf(j->state, sizeof(j->state), "pending");
	j->created_ms = j->updated_ms = f->now;
}

static int count_jobs(struct fx *f)
{
	struct cnl_store_job *out = calloc(64, sizeof(*out));
	int n = -1;

	assert_non_null(out);
	assert_int_equal(cnl_store_job_list(f->s, NULL, NULL, 64, out, &n), 0);
	free(out);
	return n;
}

/* ---- tests ------------------------------------------------------------- */

static void test_idempotent_create_all_or_nothing(void **state)
{
	struct fx f;
	int points = 0;

	for (int n = 1;; n++) {
		struct cnl_store_job j, got;
		char key[32];
		int r, before;

		fx_setup(&f);
		/* Something stored before must survive every fault. */
		job_template(&f, &j);
		assert_int_equal(cnl_store_job_create(f.s, &j, "k-old", NULL),
		                 CNL_STORE_CREATED);
		before = count_jobs(&f);
		job_template(&f, &j);
		snprintf(key, sizeof(key), "k-%d", n);
		armed = n;
		r = cnl_store_job_create(f.s, &j, key, &got);
		reopen(&f);
		assert_int_equal(count_jobs(&f), before + (r > 0));
		if (r > 0) {
			/* Acknowledged: the job and its key are both there. */
			assert_int_equal(cnl_store_job_get(f.s, j.id, &got), 0);
			assert_int_equal(
			    cnl_store_job_create(f.s, &j, key, &got),
			    CNL_STORE_REPLAYED);
			fx_done(&f);
			break;
		}
		/* Refused: no job, and the key is free for a retry. */
		assert_int_equal(cnl_store_job_get(f.s, j.id, &got),
		                 -CNL_ENOTFOUND);
		assert_int_equal(cnl_store_job_create(f.s, &j, key, &got),
		                 CNL_STORE_CREATED);
		assert_int_equal(cnl_store_job_get(f.s, j.id, &got), 0);
		points++;
		fx_done(&f);
	}
	assert_true(points > 0); /* some write or sync did fail */
	assert_true(faults >= points);
	print_message("%d failure points\n", points);
}

static void test_disk_full_is_enospc(void **state)
{
	struct fx f;
	int points = 0;

	for (int n = 1;; n++) {
		struct cnl_store_job j, old, got;
		int r, before;

		fx_setup(&f);
		job_template(&f, &old);
		assert_int_equal(cnl_store_job_create(f.s, &old, NULL, NULL),
		                 CNL_STORE_CREATED);
		before = count_jobs(&f);
		job_template(&f, &j);
		write_rc = SQLITE_FULL;
		armed = n;
		r = cnl_store_job_create(f.s, &j, "k-full", &got);
		armed = 0;
		write_rc = 0;
		if (r > 0) {
			fx_done(&f);
			break;
		}
		/* Full: said so, nothing half-stored, and the same handle
		 * writes again once there is room (no reopen). */
		assert_int_equal(r, -ENOSPC);
		assert_int_equal(count_jobs(&f), before);
		assert_int_equal(cnl_store_job_get(f.s, old.id, &got), 0);
		assert_int_equal(cnl_store_job_create(f.s, &j, "k-full", &got),
		                 CNL_STORE_CREATED);
		assert_int_equal(count_jobs(&f), before + 1);
		points++;
		fx_done(&f);
	}
	assert_true(points > 0);
	print_message("%d failure points\n", points);
}

static void test_job_with_files_in_one_transaction(void **state)
{
	struct fx f;
	int points = 0;

	for (int n = 1;; n++) {
		struct cnl_store_job j, got;
		struct cnl_store_doc d = {0}, back;
		int r;

		fx_setup(&f);
		job_template(&f, &j);
		armed = n;
		r = cnl_store_tx_begin(f.s);
		if (r == 0)
			r = cnl_store_job_create(f.s, &j, "k-files", &got);
		for (int i = 0; r >= 0 && i < 3; i++) {
			snprintf(d.kind, sizeof(d.kind), "input");
			snprintf(d.id, sizeof(d.id), "%s/f%d", j.id, i);
			snprintf(d.parent, sizeof(d.parent), "%s", j.id);
			d.body = "{\"data_base64\":\"aGVsbG8=\"}";
			d.updated_ms = 1;
			r = cnl_store_doc_put(f.s, &d, true);
		}
		if (r >= 0)
			r = cnl_store_tx_commit(f.s);
		if (r < 0)
			cnl_store_tx_rollback(f.s);
		reopen(&f);
		if (r >= 0) {
			assert_int_equal(cnl_store_job_get(f.s, j.id, &got), 0);
			for (int i = 0; i < 3; i++) {
				snprintf(d.id, sizeof(d.id), "%s/f%d", j.id, i);
				assert_int_equal(cnl_store_doc_get(f.s, "input",
				                                   d.id, &back),
				                 0);
				cnl_store_doc_done(&back);
			}
			fx_done(&f);
			break;
		}
		/* Nothing of it: neither the job nor any of its files. */
		assert_int_equal(cnl_store_job_get(f.s, j.id, &got),
		                 -CNL_ENOTFOUND);
		for (int i = 0; i < 3; i++) {
			snprintf(d.id, sizeof(d.id), "%s/f%d", j.id, i);
			assert_int_equal(
			    cnl_store_doc_get(f.s, "input", d.id, &back),
			    -CNL_ENOTFOUND);
		}
		points++;
		fx_done(&f);
	}
	assert_true(points > 0);
	print_message("%d failure points\n", points);
}

static void test_audit_chain_survives_faults(void **state)
{
	struct fx f;
	int points = 0;

	for (int n = 1;; n++) {
		struct cnl_store_audit a = {0}, out[8];
		int64_t bad = 0;
		int r, k = -1;

		fx_setup(&f);
		for (int i = 0; i < 3; i++) {
			a.ts_ms = i;
			snprintf(a.actor, sizeof(a.actor), "usr_x");
			snprintf(a.action, sizeof(a.action), "job.create");
			snprintf(a.result, sizeof(a.result), "201");
			assert_int_equal(cnl_store_audit_append(f.s, &a, NULL),
			                 0);
		}
		armed = n;
		r = cnl_store_audit_append(f.s, &a, NULL);
		reopen(&f);
		assert_int_equal(cnl_store_audit_verify(f.s, &bad), 0);
		assert_int_equal(cnl_store_audit_list(f.s, 0, 8, out, &k), 0);
		assert_int_equal(k, r == 0 ? 4 : 3);
		fx_done(&f);
		if (r == 0)
			break;
		points++;
	}
	assert_true(points > 0);
	print_message("%d failure points\n", points);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_idempotent_create_all_or_nothing),
	    cmocka_unit_test(test_job_with_files_in_one_transaction),
	    cmocka_unit_test(test_audit_chain_survives_faults),
	    cmocka_unit_test(test_disk_full_is_enospc),
	};

	vfs_install();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
