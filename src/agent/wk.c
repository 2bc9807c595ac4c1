/*
 * wk.c - the bottom of the agent's daemon (agent-internal.h): the workload
 * table, the paths of the work directory, and each workload's local state
 * file, state/<id>.json, which a restarted agent reads to re-adopt the
 * workload.
 *
 * The state file is the agent's own, not a protocol message: written by
 * this binary, read back by it after a restart.  It is still read field by
 * field with the strict readers of common/json.h, so that a damaged file is
 * refused naming the field rather than adopted half-read.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"
#include "net/otel.h"

struct wk *cnl_agent_wk_find(struct cnl_agent *a, const char *id)
{
	for (size_t i = 0; i < a->n_wk; i++)
		if (strcmp(a->wk[i]->id, id) == 0)
			return a->wk[i];
	return NULL;
}

struct wk *cnl_agent_wk_new(const char *id, int64_t epoch)
{
	struct wk *w = cnl_xcalloc(1, sizeof(*w));

	snprintf(w->id, sizeof(w->id), "%s", id);
	w->epoch = epoch;
	w->gpu = -1;
	w->mig_start = -1;
	w->board_slot = -1;
	w->vram_shrink_to = -1;
	w->out_rd = w->err_rd = -1;
	return w;
}

void cnl_agent_wk_add(struct cnl_agent *a, struct wk *w)
{
	if (a->n_wk == a->cap_wk) {
		a->cap_wk = a->cap_wk ? 2 * a->cap_wk : 16;
		a->wk = cnl_xrealloc(a->wk, a->cap_wk * sizeof(*a->wk));
	}
	a->wk[a->n_wk++] = w;
	cnl_agent_wake(a);
}

void cnl_agent_wake(const struct cnl_agent *a)
{
	uint64_t one = 1;

	if (a->wake_fd >= 0 && write(a->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is full, so a wake is pending anyway */
	}
}

void cnl_agent_mig_release(struct cnl_agent *a, const char *uuid)
{
	if (!uuid[0])
		return;
	for (size_t i = 0; i < a->n_wk; i++)
		if (strcmp(a->wk[i]->mig_uuid, uuid) == 0)
			return;
	cnl_gpus_mig_destroy(a->gpus, uuid);
}

void cnl_agent_wk_free(struct wk *w)
{
	if (!w)
		return;
	if (w->out_rd >= 0)
		close(w->out_rd);
	if (w->err_rd >= 0)
		close(w->err_rd);
	cnl_fwd_stop(w->fwd);
	free(w);
}

void cnl_agent_wk_remove(struct cnl_agent *a, struct wk *w)
{
	for (size_t i = 0; i < a->n_wk; i++)
		if (a->wk[i] == w) {
			a->wk[i] = a->wk[--a->n_wk];
			break;
		}
	cnl_agent_mig_release(a, w->mig_uuid);
	cnl_workload_free(w->w);
	cnl_agent_wk_free(w);
}

void cnl_agent_out_path(const struct cnl_agent *a, const char *id,
                        const char *stream, char *buf, size_t len)
{
	snprintf(buf, len, "%s/state/%s.%s", a->cfg.work_dir, id, stream);
}

int cnl_agent_mkdirs(const char *path)
{
	char buf[600];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	/* 0711: others may pass through (a workload running as another
	 * user reaches its own folder below) but not list. */
	for (size_t i = 1; i < n; i++)
		if (buf[i] == '/') {
			buf[i] = '\0';
			if (mkdir(buf, 0711) < 0 && errno != EEXIST)
				return -errno;
			buf[i] = '/';
		}
	if (mkdir(buf, 0711) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int cnl_agent_wk_dirs(const struct wk *w)
{
	const char *const dirs[] = {w->dir, w->art, w->ckpt};
	char parent[sizeof(w->dir)];
	char *slash;
	int r;

	snprintf(parent, sizeof(parent), "%s", w->dir);
	if ((slash = strrchr(parent, '/')) && slash != parent) {
		*slash = '\0';
		if ((r = cnl_agent_mkdirs(parent)) < 0)
			return r;
	}
	for (size_t i = 0; i < CNL_ARRAY_SIZE(dirs); i++) {
		if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST)
			return -errno;
		/* Whatever the umask, and a folder of a server kept from
		 * an older version closed too. */
		if (chmod(dirs[i], 0700) < 0)
			return -errno;
	}
	return 0;
}

/* What walk() does: @entry to each entry of a folder (a folder before its
 * content), @after to each folder once its content was walked. */
struct walk_ops {
	void (*entry)(int dfd, const char *name, const struct stat *st,
	              void *arg);
	void (*after)(int dfd, const char *name, void *arg);
};

/* Walk what @dfd holds (and close it), following no link and not leaving
 * the file system @dev: a link or a mount a tenant planted leads nowhere. */
static void walk(int dfd, dev_t dev, const struct walk_ops *ops, void *arg)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;

	if (!d) {
		close(dfd);
		return;
	}
	while ((e = readdir(d))) {
		struct stat st;
		int sub;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (ops->entry)
			ops->entry(dirfd(d), e->d_name, &st, arg);
		if (!S_ISDIR(st.st_mode) || st.st_dev != dev)
			continue;
		sub = openat(dirfd(d), e->d_name,
		             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0)
			walk(sub, dev, ops, arg);
		if (ops->after)
			ops->after(dirfd(d), e->d_name, arg);
	}
	closedir(d);
}

/* Open folder @path, not a link, and its file system. */
static int open_top(const char *path, dev_t *ret_dev)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	*ret_dev = st.st_dev;
	return fd;
}

static void rm_entry(int dfd, const char *name, const struct stat *st,
                     void *arg)
{
	if (!S_ISDIR(st->st_mode))
		unlinkat(dfd, name, 0);
}

static void rm_dir(int dfd, const char *name, void *arg)
{
	unlinkat(dfd, name, AT_REMOVEDIR);
}

void cnl_agent_rmtree(const char *path)
{
	static const struct walk_ops ops = {rm_entry, rm_dir};
	dev_t dev;
	int fd = open_top(path, &dev);

	if (fd < 0)
		return;
	walk(fd, dev, &ops, NULL);
	rmdir(path);
}

struct owner {
	uid_t uid;
	gid_t gid;
};

static void chown_entry(int dfd, const char *name, const struct stat *st,
                        void *arg)
{
	const struct owner *o = arg;

	(void)fchownat(dfd, name, o->uid, o->gid, AT_SYMLINK_NOFOLLOW);
}

int cnl_agent_chown_tree(const char *path, int uid, int gid)
{
	static const struct walk_ops ops = {chown_entry, NULL};
	struct owner o = {(uid_t)uid, (gid_t)gid};
	dev_t dev;
	int fd = open_top(path, &dev);

	if (fd < 0)
		return fd;
	if (fchown(fd, o.uid, o.gid) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	walk(fd, dev, &ops, &o);
	return 0;
}

/* ---- the state file ------------------------------------------------------ */

static void state_path(const struct cnl_agent *a, const char *id, char *buf,
                       size_t len)
{
	snprintf(buf, len, "%s/state/%.63s.json", a->cfg.work_dir, id);
}

void cnl_agent_state_save(const struct cnl_agent *a, const struct wk *w)
{
	char path[700];
	json_t *o = json_pack(
	    "{s:s,s:I,s:b,s:s,s:s,s:s,s:s,s:i,s:I,s:i,s:I,s:I}", "id", w->id,
	    "epoch", (json_int_t)w->epoch, "server", w->server, "dir", w->dir,
	    "art", w->art, "ckpt", w->ckpt, "region", w->region, "port",
	    w->port, "idle_timeout_ms", (json_int_t)w->idle_timeout_ms, "gpu",
	    w->gpu, "out_off", (json_int_t)w->out_off, "err_off",
	    (json_int_t)w->err_off);

	if (!o)
		return; /* a path that is not UTF-8: nothing to adopt by */
	if (w->image[0])
		json_object_set_new(o, "image", json_string(w->image));
	json_object_set_new(o, "vram_bytes",
	                    json_integer((json_int_t)w->vram_bytes));
	if (w->gpu_kill[0])
		json_object_set_new(o, "gpu_kill", json_string(w->gpu_kill));
	/* Its trace, so that an agent restarted while it runs still ends
	 * its workload span (trace.c); saved just before the launch. */
	if (w->trace[0])
		json_object_set_new(
		    o, "trace",
		    json_pack("{s:s,s:I}", "parent", w->trace, "start_ns",
		              (json_int_t)(w->trace_start_ns
		                               ? w->trace_start_ns
		                               : cnl_otel_now_ns())));
	state_path(a, w->id, path, sizeof(path));
	(void)cnl_json_write_file(o, path, 0644, JSON_COMPACT);
	json_decref(o);
}

void cnl_agent_state_drop(const struct cnl_agent *a, const char *id)
{
	char path[700];

	state_path(a, id, path, sizeof(path));
	unlink(path);
}

/* The string @key of @o into @buf (@size bytes), or -CNL_EFIELD. */
static int get_str(const json_t *o, const char *key, char *buf, size_t size,
                   char *err, size_t errlen)
{
	const char *s = NULL;

	if (cnl_json_get_string(o, key, true, &s, err, errlen) < 0)
		return -CNL_EFIELD;
	if (strlen(s) >= size) {
		snprintf(err, errlen, "field \"%s\": longer than %zu bytes",
		         key, size - 1);
		return -CNL_EFIELD;
	}
	memcpy(buf, s, strlen(s) + 1);
	return 0;
}

/* Open the output file @stream of @w at @off; -1 when it is gone. */
static int open_at(const struct cnl_agent *a, const struct wk *w,
                   const char *stream, int64_t off)
{
	char path[700];
	int fd;

	cnl_agent_out_path(a, w->id, stream, path, sizeof(path));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0)
		lseek(fd, off, SEEK_SET);
	return fd;
}

int cnl_agent_state_load(const struct cnl_agent *a, const char *id,
                         struct wk **ret_w, char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "id",    "epoch",      "server",   "dir",
	    "art",   "ckpt",       "region",   "port",
	    "gpu",   "out_off",    "err_off",  "idle_timeout_ms",
	    "image", "vram_bytes", "gpu_kill", "trace",
	    NULL};
	char path[700];
	json_t *o = NULL;
	struct wk *w;
	int64_t epoch = 0, port = 0, gpu = -1;
	int r;

	state_path(a, id, path, sizeof(path));
	if (access(path, F_OK) < 0)
		return -ENOENT;
	if ((r = cnl_json_load_file(path, &o, err, errlen)) < 0)
		return r;
	w = cnl_agent_wk_new(id, 0);
	/* A state file of an agent before the GPU memory audit: no quota
	 * known, none held to. */
	w->vram_bytes = -1;
	r = -CNL_EFIELD;
	if (cnl_json_check_fields(o, fields, err, errlen) < 0 ||
	    cnl_json_get_int(o, "epoch", true, 0, INT64_MAX, &epoch, err,
	                     errlen) < 0 ||
	    cnl_json_get_bool(o, "server", true, &w->server, err, errlen) < 0 ||
	    get_str(o, "dir", w->dir, sizeof(w->dir), err, errlen) < 0 ||
	    get_str(o, "art", w->art, sizeof(w->art), err, errlen) < 0 ||
	    get_str(o, "ckpt", w->ckpt, sizeof(w->ckpt), err, errlen) < 0 ||
	    get_str(o, "region", w->region, sizeof(w->region), err, errlen) <
	        0 ||
	    cnl_json_get_int(o, "port", true, -1, 65535, &port, err, errlen) <
	        0 ||
	    cnl_json_get_int(o, "gpu", true, -1, CNL_WIRE_GPUS_MAX - 1, &gpu,
	                     err, errlen) < 0 ||
	    cnl_json_get_int(o, "idle_timeout_ms", true, 0, INT64_MAX,
	                     &w->idle_timeout_ms, err, errlen) < 0 ||
	    cnl_json_get_int(o, "out_off", true, 0, INT64_MAX, &w->out_off, err,
	                     errlen) < 0 ||
	    cnl_json_get_int(o, "err_off", true, 0, INT64_MAX, &w->err_off, err,
	                     errlen) < 0 ||
	    (json_object_get(o, "image") &&
	     get_str(o, "image", w->image, sizeof(w->image), err, errlen) <
	         0) ||
	    cnl_json_get_int(o, "vram_bytes", false, -1, INT64_MAX,
	                     &w->vram_bytes, err, errlen) < 0 ||
	    (json_object_get(o, "gpu_kill") &&
	     get_str(o, "gpu_kill", w->gpu_kill, sizeof(w->gpu_kill), err,
	             errlen) < 0))
		goto fail;
	w->epoch = epoch;
	w->port = (int)port;
	w->gpu = (int)gpu;
	{
		const json_t *t = json_object_get(o, "trace");
		const char *tp =
		    json_string_value(json_object_get(t, "parent"));
		struct cnl_trace ctx;

		if (tp && cnl_trace_parse(tp, &ctx) == 0) {
			cnl_trace_format(&ctx, w->trace);
			w->trace_start_ns =
			    json_integer_value(json_object_get(t, "start_ns"));
		}
	}
	w->out_rd = open_at(a, w, "stdout", w->out_off);
	w->err_rd = open_at(a, w, "stderr", w->err_off);
	json_decref(o);
	*ret_w = w;
	return 0;
fail:
	json_decref(o);
	cnl_agent_wk_free(w);
	return r;
}
