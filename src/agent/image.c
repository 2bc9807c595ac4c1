/*
 * image.c - the node-local image store: the images this node's workloads
 * run, fetched blob by blob from cnlabd, verified, unpacked once, shared.
 *
 *   <work_dir>/images/                  0700
 *     oci-layout, index.json            an OCI image layout (umoci reads
 *                                       it; index.json names the one
 *                                       manifest being unpacked)
 *     blobs/sha256/<hex>                each verified against its name
 *     rootfs/<hex>/                     manifest <hex> unpacked: the
 *                                       read-only lower layer of every
 *                                       container of that image
 *     rootfs/.tmp-<hex>                 an unpack under way (or cut short)
 *     lock                              one fetch and unpack at a time
 *
 * A workload of an image calls cnl_agent_image_get(): when the rootfs is
 * there it is used at once (its mtime records the use); otherwise, under
 * the lock, the manifest, the config and each layer missing are fetched
 * (GET /v1/nodes/{node}/blobs/{digest}, streamed to a file, its SHA-256
 * compared with the digest: a damaged blob is never kept), and umoci
 * unpacks the layers (whiteouts, links and ownership as the OCI spec
 * says) into rootfs/.tmp-<hex>, which is renamed into place when whole.
 * Each container gets its own writable layer over it (container.c).
 *
 * Garbage: cnl_agent_images_gc() removes each unpacked image that no
 * workload of this node runs and that none started within image_keep_s,
 * then every blob that no remaining image names.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "agent/image.h"
#include "cnlab/errors.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"

#define JSON_BLOB_MAX (4 << 20) /* a manifest or config, at most */

static void images_path(const struct cnl_agent *a, const char *sub, char *buf,
                        size_t len)
{
	snprintf(buf, len, "%s/images%s%s", a->cfg.work_dir, sub[0] ? "/" : "",
	         sub);
}

/* The folders of the store, 0700. */
static int store_dirs(const struct cnl_agent *a)
{
	static const char *const sub[] = {"", "blobs", "blobs/sha256",
	                                  "rootfs"};
	char p[700];

	for (size_t i = 0; i < CNL_ARRAY_SIZE(sub); i++) {
		images_path(a, sub[i], p, sizeof(p));
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -errno;
	}
	return 0;
}

static bool is_hex64(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* Blob @hex in the store, fetched from cnlabd if missing. */
static int fetch_blob(struct cnl_agent *a, const char *hex, char *err,
                      size_t errlen)
{
	char path[800], tmp[800], route[300];
	struct cnl_client_reply rep = {0};
	int fd, r;

	snprintf(route, sizeof(route), "blobs/sha256/%s", hex);
	images_path(a, route, path, sizeof(path));
	if (access(path, F_OK) == 0)
		return 0;
	snprintf(route, sizeof(route), "blobs/sha256/.tmp-%s", hex);
	images_path(a, route, tmp, sizeof(tmp));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
	          0600);
	if (fd < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot store blob sha256:%.12s: %s",
		           hex, strerror(errno));
		return r;
	}
	snprintf(route, sizeof(route), "/v1/nodes/%s/blobs/sha256:%s",
	         a->node_id, hex);
	r = cnl_client_request(a->main_cl,
	                       &(struct cnl_client_request){
	                           .method = "GET",
	                           .path = route,
	                           .download = true,
	                           .download_fd = fd,
	                           /* Layers run to gigabytes. */
	                           .timeout_ms = 3600 * 1000,
	                       },
	                       &rep);
	if (r == 0 && rep.status == 200 && rep.downloaded &&
	    strcmp(rep.download_sha256, hex) == 0 && fsync(fd) == 0 &&
	    close(fd) == 0) {
		fd = -1;
		r = rename(tmp, path) < 0 ? -errno : 0;
	} else {
		cnl_seterr(err, errlen, "blob sha256:%.12s %s", hex,
		           r < 0 ? rep.error
		           : rep.status == 404
		               ? "is no longer on cnlabd (the image was "
		                 "deleted)"
		           : rep.status != 200 ? "was refused by cnlabd"
		           : rep.downloaded    ? "arrived damaged (its SHA-256 "
		                                 "differs)"
		                               : "could not be written");
		r = r < 0 ? r : rep.status == 404 ? -CNL_ENOTFOUND : -EIO;
	}
	if (fd >= 0)
		close(fd);
	if (r < 0)
		unlink(tmp);
	cnl_client_reply_done(&rep);
	return r;
}

static json_t *blob_json(const struct cnl_agent *a, const char *hex)
{
	char sub[100], path[800];
	struct stat st;

	snprintf(sub, sizeof(sub), "blobs/sha256/%s", hex);
	images_path(a, sub, path, sizeof(path));
	if (stat(path, &st) < 0 || st.st_size > JSON_BLOB_MAX)
		return NULL;
	return json_load_file(path, 0, NULL);
}

/* umoci raw unpack of manifest @hex into @dest; its last words in @err. */
static int unpack(struct cnl_agent *a, const char *hex, size_t size,
                  const char *dest, char *err, size_t errlen)
{
	char layout[700], index[700], log[700], image[800];
	json_t *ix;
	pid_t pid;
	int st, fd, r;

	images_path(a, "", layout, sizeof(layout));
	images_path(a, "index.json", index, sizeof(index));
	images_path(a, "unpack.log", log, sizeof(log));
	ix = json_pack("{s:i,s:[{s:s,s:s+,s:I,s:{s:s}}]}", "schemaVersion", 2,
	               "manifests", "mediaType",
	               "application/vnd.oci.image.manifest.v1+json", "digest",
	               "sha256:", hex, "size", (json_int_t)size, "annotations",
	               "org.opencontainers.image.ref.name", hex);
	r = cnl_json_write_file(ix, index, 0600, JSON_COMPACT);
	json_decref(ix);
	images_path(a, "oci-layout", image, sizeof(image));
	if (r == 0) {
		json_t *l = json_pack("{s:s}", "imageLayoutVersion", "1.0.0");

		r = cnl_json_write_file(l, image, 0600, JSON_COMPACT);
		json_decref(l);
	}
	if (r < 0) {
		cnl_seterr(err, errlen,
		           "cannot write the node's image layout: "
		           "%s",
		           strerror(-r));
		return r;
	}
	snprintf(image, sizeof(image), "%s:%s", layout, hex);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	pid = fork();
	if (pid == 0) {
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(a->umoci, "umoci", "raw", "unpack", "--image", image,
		      dest, (char *)NULL);
		_exit(127);
	}
	if (fd >= 0)
		close(fd);
	if (pid < 0) {
		cnl_seterr(err, errlen, "cannot run umoci: %s",
		           strerror(errno));
		return -errno;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	{
		char tail[300] = "";
		FILE *f = fopen(log, "re");

		if (f) {
			size_t n;

			fseek(f, -(long)sizeof(tail) + 1, SEEK_END);
			n = fread(tail, 1, sizeof(tail) - 1, f);
			tail[n] = '\0';
			fclose(f);
		}
		for (char *p = tail; *p; p++)
			if (*p == '\n')
				*p = ' ';
		cnl_seterr(err, errlen, "umoci could not unpack the image: %s",
		           tail[0] ? tail : "(no message)");
	}
	return -EIO;
}

/* One entry of an image just unpacked, made harmless on the node: umoci
 * unpacks as root, so a layer's device nodes, FIFOs, set-id bits, file
 * capabilities and owners (host accounts' ids) would be the node's. */
static int defuse(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ||
	    S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode)) {
		unlink(path);
		return 0;
	}
	if (st->st_uid != 0 || st->st_gid != 0)
		(void)lchown(path, 0, 0);
	if (S_ISLNK(st->st_mode))
		return 0;
	(void)lremovexattr(path, "security.capability");
	if (st->st_mode & (S_ISUID | S_ISGID))
		(void)chmod(path, st->st_mode & 01777);
	return 0;
}

/* The image's environment (config.Env) as a NULL-ended array of strings
 * (malloc'd, one block), or NULL. */
static char **image_env(const struct cnl_agent *a, json_t *man)
{
	const char *hex = cnl_digest_hex(json_string_value(
	    json_object_get(json_object_get(man, "config"), "digest")));
	json_t *cfg = hex ? blob_json(a, hex) : NULL;
	json_t *env = json_object_get(json_object_get(cfg, "config"), "Env");
	size_t n = json_array_size(env), bytes = (n + 1) * sizeof(char *), i;
	json_t *v;
	char **out, *p;

	if (!n) {
		json_decref(cfg);
		return NULL;
	}
	json_array_foreach (env, i, v)
		bytes +=
		    json_is_string(v) ? strlen(json_string_value(v)) + 1 : 0;
	out = cnl_xmalloc(bytes);
	p = (char *)(out + n + 1);
	n = 0;
	json_array_foreach (env, i, v) {
		const char *s = json_string_value(v);

		if (!s || !strchr(s, '='))
			continue;
		memcpy(p, s, strlen(s) + 1);
		out[n++] = p;
		p += strlen(s) + 1;
	}
	out[n] = NULL;
	json_decref(cfg);
	return out;
}

int cnl_agent_image_get(struct cnl_agent *a, const char *name,
                        const char *digest, int64_t bytes, char *root,
                        size_t len, char ***ret_env, char *err, size_t errlen)
{
	const char *hex = cnl_digest_hex(digest);
	char sub[120], tmp[800], lockp[700];
	json_t *man = NULL, *l;
	struct stat st;
	int lfd = -1, r;
	size_t i;

	*ret_env = NULL;
	if (!hex) {
		cnl_seterr(err, errlen,
		           "image %s no longer exists on this platform (it "
		           "was deleted after the submission)",
		           name);
		return -CNL_ENOTFOUND;
	}
	snprintf(sub, sizeof(sub), "rootfs/%s", hex);
	images_path(a, sub, root, len);
	if ((r = store_dirs(a)) < 0) {
		cnl_seterr(err, errlen, "cannot make the image store: %s",
		           strerror(-r));
		return r;
	}
	images_path(a, "lock", lockp, sizeof(lockp));
	lfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot lock the image store: %s",
		           strerror(errno));
		goto out;
	}
	if ((r = fetch_blob(a, hex, err, errlen)) < 0)
		goto out;
	if (!(man = blob_json(a, hex)) ||
	    !json_is_object(json_object_get(man, "config")) ||
	    !json_is_array(json_object_get(man, "layers"))) {
		r = -CNL_EPARSE;
		cnl_seterr(err, errlen, "image %s: its manifest is not one",
		           name);
		goto out;
	}
	if (stat(root, &st) == 0) {
		/* Unpacked before: the use is recorded for the collector. */
		utimensat(AT_FDCWD, root, NULL, 0);
		goto env;
	}
	{
		int64_t t0 = cnl_time_now_ms();
		const char *ch = cnl_digest_hex(json_string_value(
		    json_object_get(json_object_get(man, "config"), "digest")));

		if (!ch) {
			r = -CNL_EPARSE;
			cnl_seterr(err, errlen,
			           "image %s: its config is not a "
			           "sha256 blob",
			           name);
			goto out;
		}
		if ((r = fetch_blob(a, ch, err, errlen)) < 0)
			goto out;
		json_array_foreach (json_object_get(man, "layers"), i, l) {
			const char *lh = cnl_digest_hex(
			    json_string_value(json_object_get(l, "digest")));

			if (!lh) {
				r = -CNL_EPARSE;
				cnl_seterr(
				    err, errlen,
				    "image %s: layer %zu is not a sha256 "
				    "blob",
				    name, i + 1);
				goto out;
			}
			if ((r = fetch_blob(a, lh, err, errlen)) < 0)
				goto out;
		}
		snprintf(sub, sizeof(sub), "rootfs/.tmp-%s", hex);
		images_path(a, sub, tmp, sizeof(tmp));
		cnl_agent_rmtree(tmp);
		snprintf(sub, sizeof(sub), "blobs/sha256/%s", hex);
		images_path(a, sub, lockp, sizeof(lockp));
		if (stat(lockp, &st) < 0 ||
		    (r = unpack(a, hex, (size_t)st.st_size, tmp, err, errlen)) <
		        0 ||
		    (nftw(tmp, defuse, 64, FTW_PHYS | FTW_MOUNT) != 0 &&
		     (r = -EIO)) ||
		    (chmod(tmp, 0755) < 0 && (r = -errno)) ||
		    (rename(tmp, root) < 0 && (r = -errno))) {
			if (r == 0)
				r = -errno;
			if (!err[0])
				cnl_seterr(err, errlen,
				           "cannot unpack image %s: %s", name,
				           strerror(-r));
			cnl_agent_rmtree(tmp);
			/* A blob damaged on this node since it was fetched
			 * would fail every start: they are fetched anew. */
			json_array_foreach (json_object_get(man, "layers"), i,
			                    l) {
				const char *lh =
				    cnl_digest_hex(json_string_value(
				        json_object_get(l, "digest")));

				snprintf(sub, sizeof(sub), "blobs/sha256/%s",
				         lh ? lh : ".none");
				images_path(a, sub, lockp, sizeof(lockp));
				unlink(lockp);
			}
			goto out;
		}
		cnl_log(CNL_LOG_INFO, "image unpacked",
		        "name=%s manifest=%.19s ms=%" PRId64, name, digest,
		        cnl_time_now_ms() - t0);
	}
env:
	*ret_env = image_env(a, man);
	r = 0;
out:
	json_decref(man);
	if (lfd >= 0)
		close(lfd);
	return r;
}

int cnl_images_collect(const char *store, int64_t keep_s,
                       const char *const *in_use, size_t n_in_use)
{
	char dir[700], lockp[700];
	json_t *keep = json_object();
	int64_t now = cnl_time_now_ms();
	struct dirent *e;
	DIR *d;
	int lfd, r = 0;

	snprintf(lockp, sizeof(lockp), "%s/lock", store);
	if ((lfd = open(lockp, O_RDWR | O_CLOEXEC)) < 0) {
		r = -errno; /* no store yet */
		goto done;
	}
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
		r = -EBUSY; /* a fetch or unpack under way: another time */
		goto done;
	}
	snprintf(dir, sizeof(dir), "%s/rootfs", store);
	if (!(d = opendir(dir))) {
		r = -errno;
		goto done;
	}
	while ((e = readdir(d))) {
		char p[1000];
		struct stat st;
		json_t *man, *l;
		bool used = false;
		size_t i;

		if (!is_hex64(e->d_name) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		for (i = 0; i < n_in_use && !used; i++)
			used = strcmp(in_use[i], e->d_name) == 0;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (!used &&
		    now - (int64_t)st.st_mtime * 1000 >= keep_s * 1000) {
			cnl_agent_rmtree(p);
			cnl_log(CNL_LOG_INFO, "image removed",
			        "manifest=sha256:%.12s", e->d_name);
			continue;
		}
		json_object_set_new(keep, e->d_name, json_true());
		snprintf(p, sizeof(p), "%s/blobs/sha256/%s", store, e->d_name);
		man = json_load_file(p, 0, NULL);
		json_array_foreach (json_object_get(man, "layers"), i, l) {
			const char *h = cnl_digest_hex(
			    json_string_value(json_object_get(l, "digest")));

			if (h)
				json_object_set_new(keep, h, json_true());
		}
		l = json_object_get(json_object_get(man, "config"), "digest");
		if (cnl_digest_hex(json_string_value(l)))
			json_object_set_new(
			    keep, cnl_digest_hex(json_string_value(l)),
			    json_true());
		json_decref(man);
	}
	closedir(d);
	snprintf(dir, sizeof(dir), "%s/blobs/sha256", store);
	if (!(d = opendir(dir))) {
		r = -errno;
		goto done;
	}
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && !json_object_get(keep, e->d_name))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
done:
	if (lfd >= 0)
		close(lfd);
	json_decref(keep);
	return r;
}

void cnl_agent_images_gc(struct cnl_agent *a)
{
	const char **in_use;
	char store[700];
	size_t n = 0;

	images_path(a, "", store, sizeof(store));
	pthread_mutex_lock(&a->mu);
	in_use = cnl_xcalloc(a->n_wk + 1, sizeof(*in_use));
	for (size_t i = 0; i < a->n_wk; i++)
		if (a->wk[i]->image[0])
			in_use[n++] = a->wk[i]->image;
	/* Names only read while the lock is held: copies. */
	for (size_t i = 0; i < n; i++)
		in_use[i] = cnl_xstrdup(in_use[i]);
	pthread_mutex_unlock(&a->mu);
	(void)cnl_images_collect(store, a->cfg.image_keep_s, in_use, n);
	for (size_t i = 0; i < n; i++)
		free((char *)in_use[i]);
	free(in_use);
}
