/*
 * api_images.c - the platform's container images: imported by an
 * administrator as an OCI archive, listed for everyone, deleted, and
 * served blob by blob to the nodes' agents, which keep their own copies
 * (the node-local store, src/agent/image.c).
 *
 * Where they live.  Under the files folder of the data directory:
 *
 *   files/images/blobs/sha256/<hex>   content-addressed, 0600
 *   files/images/tmp/<random>/<hex>   the blobs of an import arriving
 *
 * and described in the store, one document of kind "image" per name
 * ("pytorch:2.4-cuda12.4"; a name without a tag gets ":latest"), its body
 * {"name", "manifest", "config", "layers": [{"digest", "size",
 * "media_type"}], "size", "created_ms", "imported_by"}.  A blob that no
 * image names any more is deleted (after a delete, or an import that
 * replaced a name).  "host" is built in: the node's own programs,
 * read-only (container.c); it cannot be imported over or deleted.
 *
 * An import, step by step (PUT /v1/images?name=N, streamed):
 *
 *   headers  the caller is an administrator; the name; Content-Length
 *            within images_max_bytes; a staging folder      [API's lock]
 *   body     read as a tar archive as it arrives (common/tar.h): each
 *            blobs/sha256/<hex> written to the staging folder, hashed,
 *            and refused unless its SHA-256 is its name; oci-layout and
 *            index.json kept in memory; anything else refused  [no lock]
 *   end      index -> manifest -> config and layers: each a blob that
 *            came (or is already stored) with the size its descriptor
 *            says, layers of a type the nodes unpack; the blobs moved
 *            into place, the document stored                [API's lock]
 *
 * Whatever fails stores nothing: the staging folder goes with the sink.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "cnlab/errors.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "common/tar.h"
#include "common/util.h"
#include "server/api-internal.h"

#define SMALL_MAX   (1 << 20) /* index.json, oci-layout */
#define IMAGES_LIST 1000      /* images a platform keeps, at most */

static const char *const layer_types[] = {
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
};

/* ---- names ----------------------------------------------------------------
 */

/*
 * A reference as users type it: [registry/]path[:tag], lower-case path
 * components of [a-z0-9._-] (a registry's host may hold ':' for its
 * port), a tag of [A-Za-z0-9_.-] up to 128.  "host" is the built-in
 * image.  Into @out with ":latest" added when there is no tag; false when
 * it is no such name.
 */
bool cnl_api_image_name(const char *in, char *out, size_t len)
{
	const char *slash = strrchr(in, '/');
	const char *colon = strrchr(slash ? slash : in, ':');
	size_t path_len = colon ? (size_t)(colon - in) : strlen(in);

	if (!in[0] || path_len == 0 || strlen(in) + 8 >= len ||
	    strlen(in) + 8 >= CNL_STORE_DOC_ID_MAX)
		return false;
	if (strcmp(in, "host") == 0 || strcmp(in, "host:latest") == 0) {
		snprintf(out, len, "host");
		return true;
	}
	for (size_t i = 0; i < path_len; i++) {
		char ch = in[i];
		bool first = i == 0 || in[i - 1] == '/';

		/* A ':' before the first '/' is a registry's port: digits
		 * only, up to that '/'. */
		if (ch == ':' && slash && !memchr(in, '/', i)) {
			size_t d = strspn(in + i + 1, "0123456789");

			if (d == 0 || d > 5 || in[i + 1 + d] != '/')
				return false;
			i += d;
			continue;
		}
		if (ch == '/' ? first || i + 1 == path_len
		              : !((ch >= 'a' && ch <= 'z') ||
		                  (ch >= '0' && ch <= '9') ||
		                  (!first && strchr("._-", ch))))
			return false;
	}
	if (colon) {
		const char *t = colon + 1;

		if (!t[0] || strlen(t) > 128 || t[0] == '.' || t[0] == '-' ||
		    strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
		              "VWXYZ0123456789_.-") != strlen(t))
			return false;
		snprintf(out, len, "%s", in);
	} else {
		snprintf(out, len, "%s:latest", in);
	}
	return true;
}

/* The names of the images there are, for a message: "a, b, host". */
static void names_of(struct cnl_api *api, char *buf, size_t len)
{
	struct cnl_store_doc *d = cnl_xcalloc(IMAGES_LIST, sizeof(*d));
	size_t o = 0;
	int n = 0;

	buf[0] = '\0';
	if (cnl_store_doc_list(api->store, "image", "", NULL, IMAGES_LIST, d,
	                       &n) < 0)
		n = 0;
	for (int i = 0; i < n && o + 1 < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s, ", d[i].id);
	if (o < len)
		snprintf(buf + o, len - o, "host");
	cnl_store_docs_done(d, n);
	free(d);
}

int cnl_api_image_check(struct call *c, const char *image, char *norm,
                        size_t len, struct cnl_http_response *resp)
{
	struct cnl_store_doc d = {0};
	char names[512];
	int r;

	if (!cnl_api_image_name(image, norm, len)) {
		cnl_api_bad(resp, "field \"image\": not an image name (such as "
		                  "pytorch:2.4-cuda12.4 or "
		                  "registry.example/team/app:1.0)");
		return -1;
	}
	if (strcmp(norm, "host") == 0)
		return 0;
	r = cnl_store_doc_get(c->api->store, "image", norm, &d);
	cnl_store_doc_done(&d);
	if (r == 0)
		return 0;
	if (r != -CNL_ENOTFOUND) {
		cnl_api_store_error(c, resp, r, "image");
		return -1;
	}
	names_of(c->api, names, sizeof(names));
	cnl_http_error(resp, 400, "unknown_image",
	               "field \"image\": no image \"%s\" on this platform; "
	               "there are: %s (an administrator adds one with "
	               "`cnlab image import FILE --name %s`)",
	               norm, names, norm);
	return -1;
}

/* ---- the folders ------------------------------------------------------------
 */

static int images_dir(struct cnl_api *api, const char *sub, char *buf,
                      size_t len)
{
	char p[4096];

	if (!api->files_dir)
		return -ENOENT;
	snprintf(p, sizeof(p), "%s/images", api->files_dir);
	if (mkdir(api->files_dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (mkdir(p, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (!sub) {
		snprintf(buf, len, "%s", p);
		return 0;
	}
	if ((size_t)snprintf(buf, len, "%s/images/%s", api->files_dir, sub) >=
	    len)
		return -ENAMETOOLONG;
	if (strcmp(sub, "blobs/sha256") == 0) {
		snprintf(p, sizeof(p), "%s/images/blobs", api->files_dir);
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -errno;
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* ---- the import's sink ----------------------------------------------------
 */

enum entry { E_SKIP, E_BLOB, E_LAYOUT, E_INDEX };

struct import {
	struct cnl_http_sink sink;
	struct cnl_tar tar;
	char name[CNL_STORE_IMAGE_MAX];
	char stage[4096];
	uint64_t declared, got;
	bool too_much;
	/* The entry being read. */
	enum entry what;
	int fd;
	EVP_MD_CTX *md;
	char hex[65];
	char *small;
	size_t small_len;
	/* A blob that is gzip (its first two bytes say so) is inflated as
	 * it comes: its content's SHA-256 and size (a layer's diff_id and
	 * what it takes unpacked), or that it does not inflate. */
	unsigned char head[2];
	int nhead;
	bool gz, gz_on, gz_bad;
	z_stream zs;
	EVP_MD_CTX *dmd;
	uint64_t usize;
	/* What came. */
	char *index, *layout;
	json_t *info; /* hex -> {"gzip", "ok", "diff", "size"} */
	int blobs;
	int werr;
};

static const struct cnl_tar_ops import_ops;

static int entry_begin(void *ud, const struct cnl_tar_entry *e)
{
	struct import *im = ud;
	const char *p = e->path;
	char file[4200];

	while (p[0] == '.' && p[1] == '/')
		p += 2;
	im->what = E_SKIP;
	if (!p[0] || e->type == '5')
		return 0; /* "./", folders */
	if (e->type != '0')
		return cnl_tar_fail(
		    &im->tar,
		    "\"%.200s\" is a link or a special file: an "
		    "OCI archive holds only oci-layout, "
		    "index.json and blobs",
		    p);
	if (strcmp(p, "manifest.json") == 0 || strcmp(p, "repositories") == 0)
		return cnl_tar_fail(
		    &im->tar,
		    "this is a docker-archive (it has %s), not an OCI "
		    "archive: convert it with `skopeo copy docker-archive:"
		    "FILE oci-archive:NEW.tar`",
		    p);
	if (strcmp(p, "oci-layout") == 0 || strcmp(p, "index.json") == 0) {
		if (e->size > SMALL_MAX)
			return cnl_tar_fail(&im->tar,
			                    "%s is %" PRIu64 " bytes, over %d",
			                    p, e->size, SMALL_MAX);
		im->what = p[0] == 'o' ? E_LAYOUT : E_INDEX;
		im->small = cnl_xmalloc(e->size + 1);
		im->small_len = 0;
		return 0;
	}
	if (strncmp(p, "blobs/sha256/", 13) == 0 && strlen(p + 13) == 64 &&
	    strspn(p + 13, "0123456789abcdef") == 64) {
		snprintf(im->hex, sizeof(im->hex), "%s", p + 13);
		snprintf(file, sizeof(file), "%s/%s", im->stage, im->hex);
		im->fd = open(
		    file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		    0600);
		if (im->fd < 0) {
			im->werr = errno;
			return cnl_tar_fail(&im->tar,
			                    "cannot store blob %s: %s", im->hex,
			                    strerror(errno));
		}
		EVP_DigestInit_ex(im->md, EVP_sha256(), NULL);
		EVP_DigestInit_ex(im->dmd, EVP_sha256(), NULL);
		im->nhead = 0;
		im->gz = im->gz_bad = false;
		im->usize = 0;
		im->what = E_BLOB;
		return 0;
	}
	if (strncmp(p, "blobs/", 6) == 0)
		return cnl_tar_fail(&im->tar,
		                    "\"%.200s\": only sha256 blobs named by "
		                    "their 64 hex digits are accepted",
		                    p);
	return cnl_tar_fail(&im->tar,
	                    "\"%.200s\" is not part of an OCI archive "
	                    "(oci-layout, index.json, blobs/sha256/...)",
	                    p);
}

/* Inflate @n more bytes of a gzip blob into the content's digest. */
static void inflate_more(struct import *im, const unsigned char *p, size_t n)
{
	unsigned char out[65536];

	im->zs.next_in = (unsigned char *)p;
	im->zs.avail_in = (uInt)n;
	while (!im->gz_bad && im->zs.avail_in > 0) {
		int zr;

		im->zs.next_out = out;
		im->zs.avail_out = sizeof(out);
		zr = inflate(&im->zs, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
			im->gz_bad = true;
			break;
		}
		EVP_DigestUpdate(im->dmd, out, sizeof(out) - im->zs.avail_out);
		im->usize += sizeof(out) - im->zs.avail_out;
		if (zr == Z_STREAM_END) {
			/* Concatenated members, as gzip allows. */
			if (im->zs.avail_in && inflateReset(&im->zs) != Z_OK)
				im->gz_bad = true;
			continue;
		}
		if (zr == Z_BUF_ERROR && im->zs.avail_out != 0)
			break;
	}
}

/* The content of a blob: @n more of its bytes (raw, or gzip inflated). */
static void content(struct import *im, const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;

	while (im->nhead < 2 && n > 0) {
		im->head[im->nhead++] = *u++;
		n--;
		if (im->nhead == 2) {
			im->gz = im->head[0] == 0x1f && im->head[1] == 0x8b;
			if (im->gz) {
				memset(&im->zs, 0, sizeof(im->zs));
				im->gz_on =
				    inflateInit2(&im->zs, 15 + 16) == Z_OK;
				im->gz_bad = !im->gz_on;
				inflate_more(im, im->head, 2);
			} else {
				EVP_DigestUpdate(im->dmd, im->head, 2);
				im->usize += 2;
			}
		}
	}
	if (n == 0)
		return;
	if (im->gz) {
		inflate_more(im, u, n);
	} else {
		EVP_DigestUpdate(im->dmd, u, n);
		im->usize += n;
	}
}

static int entry_data(void *ud, const char *p, size_t n)
{
	struct import *im = ud;

	if (im->what == E_LAYOUT || im->what == E_INDEX) {
		memcpy(im->small + im->small_len, p, n);
		im->small_len += n;
	} else if (im->what == E_BLOB) {
		for (size_t o = 0; o < n;) {
			ssize_t w = write(im->fd, p + o, n - o);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				im->werr = w < 0 ? errno : ENOSPC;
				return cnl_tar_fail(
				    &im->tar, "cannot store blob %s: %s",
				    im->hex, strerror(im->werr));
			}
			o += (size_t)w;
		}
		EVP_DigestUpdate(im->md, p, n);
		content(im, p, n);
	}
	return 0;
}

static int entry_end(void *ud)
{
	struct import *im = ud;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char got[65];

	if (im->what == E_LAYOUT || im->what == E_INDEX) {
		char **to = im->what == E_LAYOUT ? &im->layout : &im->index;

		im->small[im->small_len] = '\0';
		free(*to);
		*to = im->small;
		im->small = NULL;
	} else if (im->what == E_BLOB) {
		int fd = im->fd;

		im->fd = -1;
		EVP_DigestFinal_ex(im->md, md, &mdlen);
		cnl_hex(md, mdlen, got);
		if (fsync(fd) < 0 || close(fd) < 0) {
			im->werr = errno;
			return cnl_tar_fail(&im->tar,
			                    "cannot store blob %s: %s", im->hex,
			                    strerror(errno));
		}
		if (strcmp(got, im->hex) != 0)
			return cnl_tar_fail(
			    &im->tar,
			    "blob sha256:%.12s… is damaged: its "
			    "content hashes to sha256:%.12s…",
			    im->hex, got);
		if (im->nhead == 1) {
			EVP_DigestUpdate(im->dmd, im->head, 1);
			im->usize = 1;
		}
		EVP_DigestFinal_ex(im->dmd, md, &mdlen);
		cnl_hex(md, mdlen, got);
		if (im->gz_on) {
			inflateEnd(&im->zs);
			im->gz_on = false;
		}
		json_object_set_new(im->info, im->hex,
		                    json_pack("{s:b,s:b,s:s+,s:I}", "gzip",
		                              im->gz, "ok", !im->gz_bad, "diff",
		                              "sha256:", got, "size",
		                              (json_int_t)im->usize));
		im->blobs++;
	}
	im->what = E_SKIP;
	return 0;
}

static const struct cnl_tar_ops import_ops = {entry_begin, entry_data,
                                              entry_end};

static int import_write(struct cnl_http_sink *s, const char *data, size_t n)
{
	struct import *im = (struct import *)s;

	if (n > im->declared - im->got) {
		im->too_much = true;
		return -1;
	}
	im->got += n;
	return cnl_tar_feed(&im->tar, data, n) < 0 ? -1 : 0;
}

static void import_free(struct cnl_http_sink *s)
{
	struct import *im = (struct import *)s;

	if (im->fd >= 0)
		close(im->fd);
	if (im->stage[0]) {
		char *slash = strrchr(im->stage, '/');
		int dfd;

		*slash = '\0';
		dfd = open(im->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			cnl_api_remove_tree_at(dfd, slash + 1);
			close(dfd);
		}
	}
	EVP_MD_CTX_free(im->md);
	EVP_MD_CTX_free(im->dmd);
	if (im->gz_on)
		inflateEnd(&im->zs);
	json_decref(im->info);
	cnl_tar_done(&im->tar);
	free(im->small);
	free(im->index);
	free(im->layout);
	free(im);
}

int cnl_api_open_import(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp,
                        struct cnl_http_sink **ret)
{
	const char *name = cnl_http_query(req, "name");
	const char *cl = cnl_http_header(req, "Content-Length");
	char dir[4096], rnd[40];
	unsigned long long v;
	struct import *im;
	char *end;
	int r;

	if (!c->api->files_dir) {
		cnl_http_error(resp, 503, "no_storage",
		               "this cnlabd keeps no files (it has no data "
		               "directory)");
		return -1;
	}
	im = cnl_xcalloc(1, sizeof(*im));
	im->fd = -1;
	im->sink.write = import_write;
	im->sink.free = import_free;
	if (!name || !cnl_api_image_name(name, im->name, sizeof(im->name))) {
		cnl_http_error(resp, 400, "bad_request",
		               "query \"name\": an image name such as "
		               "pytorch:2.4-cuda12.4 is required");
		goto fail;
	}
	if (strcmp(im->name, "host") == 0) {
		cnl_http_error(
		    resp, 400, "bad_request",
		    "query \"name\": \"host\" is the built-in image "
		    "(the node's own programs); choose another name");
		goto fail;
	}
	if (!cl) {
		cnl_http_error(resp, 411, "length_required",
		               "image %s: Content-Length is required",
		               im->name);
		goto fail;
	}
	errno = 0;
	v = strtoull(cl, &end, 10);
	if (errno || end == cl || *end || v > INT64_MAX) {
		cnl_http_error(resp, 400, "bad_request",
		               "header Content-Length: not a size");
		goto fail;
	}
	if ((int64_t)v > c->api->images_max) {
		cnl_http_error(resp, 413, "too_large",
		               "image %s: %llu bytes, over images_max_bytes "
		               "(%" PRId64 ")",
		               im->name, v, c->api->images_max);
		goto fail;
	}
	im->declared = v;
	if ((r = images_dir(c->api, "tmp", dir, sizeof(dir))) < 0 ||
	    (r = cnl_api_random_name(rnd, sizeof(rnd))) < 0 ||
	    (size_t)snprintf(im->stage, sizeof(im->stage), "%s/%s", dir, rnd) >=
	        sizeof(im->stage) ||
	    mkdir(im->stage, 0700) < 0) {
		im->stage[0] = '\0';
		cnl_api_storage_full(resp, c->api->files_dir,
		                     "image %s: cannot store it: %s", im->name,
		                     strerror(r < 0 ? -r : errno));
		goto fail;
	}
	if (!(im->md = EVP_MD_CTX_new()) || !(im->dmd = EVP_MD_CTX_new()))
		abort(); /* out of memory, as cnl_xmalloc */
	im->info = json_object();
	cnl_tar_init(&im->tar, &import_ops, im);
	*ret = &im->sink;
	return 0;
fail:
	import_free(&im->sink);
	return -1;
}

/* ---- the import's end -------------------------------------------------------
 */

/* The size of blob @hex in the import's staging folder; -1 when the
 * archive did not hold it (an archive holds every blob of its image, even
 * one the platform has already). */
static int64_t blob_size(const struct import *im, const char *hex, char *path,
                         size_t len)
{
	struct stat st;

	snprintf(path, len, "%s/%s", im->stage, hex);
	return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Descriptor @d checked: a sha256 digest, a size, that blob present with
 * that size.  Its hex into @hex; 0, or -1 with @err. */
static int descriptor(struct cnl_api *api, const struct import *im, json_t *d,
                      const char *what, char *hex, char *err, size_t errlen)
{
	const char *dg = json_string_value(json_object_get(d, "digest"));
	json_t *sz = json_object_get(d, "size");
	char path[4200];
	int64_t have;

	if (!json_is_object(d) || !cnl_digest_hex(dg) || !json_is_integer(sz) ||
	    json_integer_value(sz) < 0) {
		snprintf(err, errlen,
		         "the %s descriptor needs a sha256 \"digest\" and a "
		         "\"size\"",
		         what);
		return -1;
	}
	snprintf(hex, 65, "%s", cnl_digest_hex(dg));
	have = blob_size(im, hex, path, sizeof(path));
	if (have < 0) {
		snprintf(err, errlen,
		         "the %s %.19s… is not in the archive (an archive "
		         "holds every blob of its image)",
		         what, dg);
		return -1;
	}
	if (have != json_integer_value(sz)) {
		snprintf(err, errlen,
		         "the %s %.19s… is %" PRId64 " bytes, its descriptor "
		         "says %" JSON_INTEGER_FORMAT,
		         what, dg, have, json_integer_value(sz));
		return -1;
	}
	return 0;
}

/* The JSON of blob @hex (a manifest, an index, a config: at most 4 MiB). */
static json_t *blob_json(struct cnl_api *api, const struct import *im,
                         const char *hex)
{
	char path[4200];
	int64_t n = blob_size(im, hex, path, sizeof(path));

	if (n < 0 || n > 4 << 20)
		return NULL;
	return json_load_file(path, 0, NULL);
}

/* The node's architecture as OCI names it. */
static const char *oci_arch(void)
{
	struct utsname u;
	static char arch[32];

	if (uname(&u) < 0)
		return "amd64";
	if (strcmp(u.machine, "x86_64") == 0)
		return "amd64";
	if (strcmp(u.machine, "aarch64") == 0)
		return "arm64";
	snprintf(arch, sizeof(arch), "%.31s", u.machine);
	return arch;
}

/*
 * From the index, the manifest to import: the only one, or the one whose
 * ref.name is the tag (or the whole name) asked for; an image index
 * among them is opened for this platform's manifest.  Its hex into @hex,
 * 0; or -1 with @err.
 */
static int pick_manifest(struct cnl_api *api, const struct import *im,
                         json_t *index, char *hex, char *err, size_t errlen)
{
	json_t *list = json_object_get(index, "manifests"), *d = NULL, *it;
	json_t *sub = NULL;
	const char *tag = strrchr(im->name, ':') + 1;
	int r = -1;
	char refs[300] = "";
	size_t i;

	if (!json_is_array(list) || json_array_size(list) == 0) {
		snprintf(err, errlen, "index.json lists no manifests");
		return -1;
	}
	if (json_array_size(list) == 1)
		d = json_array_get(list, 0);
	json_array_foreach (list, i, it) {
		const char *ref = json_string_value(
		    json_object_get(json_object_get(it, "annotations"),
		                    "org.opencontainers.image.ref.name"));
		size_t l = strlen(refs);

		if (!d && ref &&
		    (strcmp(ref, tag) == 0 || strcmp(ref, im->name) == 0))
			d = it;
		snprintf(refs + l, sizeof(refs) - l, "%s%s", l ? ", " : "",
		         ref ? ref : "(unnamed)");
	}
	if (!d) {
		snprintf(err, errlen,
		         "the archive holds %zu images (%s) and none is "
		         "tagged \"%s\": import it under one of those tags",
		         json_array_size(list), refs, tag);
		return -1;
	}
	for (int depth = 0; depth < 2; depth++) {
		const char *mt =
		    json_string_value(json_object_get(d, "mediaType"));

		if (descriptor(api, im, d, "manifest", hex, err, errlen) < 0)
			goto out;
		if (!mt ||
		    (strcmp(mt, "application/vnd.oci.image.index.v1+json") !=
		         0 &&
		     strcmp(mt, "application/vnd.docker.distribution."
		                "manifest.list.v2+json") != 0)) {
			r = 0;
			goto out;
		}
		/* An image index: this platform's manifest in it (@sub
		 * holds it while @d points into it). */
		json_decref(sub);
		sub = blob_json(api, im, hex);
		d = NULL;
		json_array_foreach (json_object_get(sub, "manifests"), i, it) {
			json_t *pf = json_object_get(it, "platform");

			if (!d &&
			    strcmp(json_string_value(json_object_get(pf, "os"))
			               ?: "",
			           "linux") == 0 &&
			    strcmp(json_string_value(
			               json_object_get(pf, "architecture"))
			               ?: "",
			           oci_arch()) == 0)
				d = it;
		}
		if (!d) {
			snprintf(err, errlen,
			         "the image index has no manifest for "
			         "linux/%s",
			         oci_arch());
			goto out;
		}
	}
	snprintf(err, errlen, "image indexes nested too deep");
out:
	json_decref(sub);
	return r;
}

/* Blob @hex moved from the staging folder into the store (already there:
 * nothing to do).  0 or -errno. */
static int keep_blob(struct cnl_api *api, const struct import *im,
                     const char *hex)
{
	char from[4200], to[4200], dir[4096];
	struct stat st;
	int r;

	if ((r = images_dir(api, "blobs/sha256", dir, sizeof(dir))) < 0)
		return r;
	snprintf(to, sizeof(to), "%s/%s", dir, hex);
	if (stat(to, &st) == 0)
		return 0;
	snprintf(from, sizeof(from), "%s/%s", im->stage, hex);
	return rename(from, to) < 0 ? -errno : 0;
}

/* Delete the stored blobs no image names any more.  Under the lock. */
static void images_gc(struct cnl_api *api)
{
	struct cnl_store_doc *d = cnl_xcalloc(IMAGES_LIST, sizeof(*d));
	json_t *keep = json_object();
	char dir[4096];
	struct dirent *e;
	DIR *dp;
	int n = 0;

	if (cnl_store_doc_list(api->store, "image", "", NULL, IMAGES_LIST, d,
	                       &n) < 0)
		goto out; /* unsure what is used: keep everything */
	for (int i = 0; i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL), *l;
		size_t k;

		if (!o)
			goto out;
		json_object_set_new(
		    keep,
		    json_string_value(json_object_get(o, "manifest")) ?: "",
		    json_true());
		json_object_set_new(
		    keep, json_string_value(json_object_get(o, "config")) ?: "",
		    json_true());
		json_array_foreach (json_object_get(o, "layers"), k, l)
			json_object_set_new(
			    keep,
			    json_string_value(json_object_get(l, "digest"))
			        ?: "",
			    json_true());
		json_decref(o);
	}
	if (images_dir(api, "blobs/sha256", dir, sizeof(dir)) < 0 ||
	    !(dp = opendir(dir)))
		goto out;
	while ((e = readdir(dp))) {
		char dg[300];

		if (e->d_name[0] == '.')
			continue;
		snprintf(dg, sizeof(dg), "sha256:%s", e->d_name);
		if (!json_object_get(keep, dg)) {
			unlinkat(dirfd(dp), e->d_name, 0);
			cnl_log(CNL_LOG_INFO, "image blob deleted", "digest=%s",
			        dg);
		}
	}
	closedir(dp);
out:
	json_decref(keep);
	cnl_store_docs_done(d, n);
	free(d);
}

/*
 * Layer @i (media type @mt, blob @hex) against what its bytes were: gzip
 * where its type says so (and inflating whole), plain otherwise; its
 * content's digest the config's diff_id @i; not a layer seen before
 * (@seen).  Its unpacked size added to *@unpacked.  0, or -1 with @err.
 */
static int layer_check(const struct import *im, json_t *cfg, size_t i,
                       const char *mt, const char *hex, json_t *seen,
                       uint64_t *unpacked, char *err, size_t errlen)
{
	json_t *info = json_object_get(im->info, hex);
	const char *diff = json_string_value(json_array_get(
	    json_object_get(json_object_get(cfg, "rootfs"), "diff_ids"), i));
	size_t l = strlen(mt);
	bool want_gz = (l > 5 && strcmp(mt + l - 5, "+gzip") == 0) ||
	               (l > 7 && strcmp(mt + l - 7, ".tar.gzip") == 0);

	if (json_object_get(seen, hex)) {
		snprintf(err, errlen, "layer %zu repeats an earlier layer",
		         i + 1);
		return -1;
	}
	json_object_set_new(seen, hex, json_true());
	if (!info || json_is_true(json_object_get(info, "gzip")) != want_gz ||
	    !json_is_true(json_object_get(info, "ok"))) {
		snprintf(err, errlen,
		         "layer %zu (sha256:%.12s…) is %s, its media type says "
		         "%s",
		         i + 1, hex,
		         !info ? "missing"
		         : !json_is_true(json_object_get(info, "gzip"))
		             ? "not gzip"
		         : json_is_true(json_object_get(info, "ok"))
		             ? "gzip"
		             : "gzip that does not inflate",
		         want_gz ? "gzip" : "an uncompressed tar");
		return -1;
	}
	if (!diff || strcmp(diff, json_string_value(
	                              json_object_get(info, "diff"))) != 0) {
		snprintf(err, errlen,
		         "layer %zu's content is %.19s…, the config's diff_id "
		         "for it %s",
		         i + 1,
		         json_string_value(json_object_get(info, "diff")),
		         diff ? diff : "is missing");
		return -1;
	}
	*unpacked +=
	    (uint64_t)json_integer_value(json_object_get(info, "size"));
	return 0;
}

/* Check what came, build the image's document into *@ret; 0, or -1 with
 * @err. */
static int import_check(struct cnl_api *api, struct import *im, json_t **ret,
                        char *err, size_t errlen)
{
	json_t *layout = NULL, *index = NULL, *man = NULL, *cfg = NULL;
	json_t *layers, *l, *out_layers = json_array(), *seen = json_object();
	char mhex[65], chex[65], lhex[65];
	uint64_t unpacked = 0;
	int64_t total = 0;
	int r = -1;
	size_t i;

	if (!im->layout || !(layout = json_loads(im->layout, 0, NULL)) ||
	    !json_is_string(json_object_get(layout, "imageLayoutVersion"))) {
		snprintf(err, errlen,
		         "not an OCI archive: oci-layout is missing or is not "
		         "{\"imageLayoutVersion\": ...}");
		goto out;
	}
	if (!im->index || !(index = json_loads(im->index, 0, NULL))) {
		snprintf(err, errlen, "not an OCI archive: index.json is %s",
		         im->index ? "not JSON" : "missing");
		goto out;
	}
	if (pick_manifest(api, im, index, mhex, err, errlen) < 0)
		goto out;
	if (!(man = blob_json(api, im, mhex)) ||
	    json_integer_value(json_object_get(man, "schemaVersion")) != 2) {
		snprintf(err, errlen,
		         "the manifest sha256:%.12s… is not an image manifest "
		         "(schemaVersion 2)",
		         mhex);
		goto out;
	}
	if (descriptor(api, im, json_object_get(man, "config"), "config", chex,
	               err, errlen) < 0)
		goto out;
	if (!(cfg = blob_json(api, im, chex)) || !json_is_object(cfg)) {
		snprintf(err, errlen, "the image's config is not JSON");
		goto out;
	}
	layers = json_object_get(man, "layers");
	if (!json_is_array(layers) || json_array_size(layers) > 127) {
		snprintf(err, errlen,
		         "the manifest's \"layers\" must be a list of at most "
		         "127");
		goto out;
	}
	json_array_foreach (layers, i, l) {
		const char *mt =
		    json_string_value(json_object_get(l, "mediaType"));
		bool known = false;

		for (size_t k = 0; k < CNL_ARRAY_SIZE(layer_types); k++)
			known =
			    known || (mt && strcmp(mt, layer_types[k]) == 0);
		if (!known) {
			snprintf(err, errlen,
			         "layer %zu has media type \"%s\"; nodes "
			         "unpack tar and tar+gzip layers (recompress "
			         "with `skopeo copy --dest-compress-format "
			         "gzip`)",
			         i + 1, mt ? mt : "(none)");
			goto out;
		}
		if (descriptor(api, im, l, "layer", lhex, err, errlen) < 0)
			goto out;
		if (layer_check(im, cfg, i, mt, lhex, seen, &unpacked, err,
		                errlen) < 0)
			goto out;
		total += json_integer_value(json_object_get(l, "size"));
		json_array_append_new(
		    out_layers,
		    json_pack("{s:s,s:I,s:s}", "digest",
		              json_string_value(json_object_get(l, "digest")),
		              "size",
		              json_integer_value(json_object_get(l, "size")),
		              "media_type", mt));
	}
	if (json_array_size(out_layers) == 0) {
		snprintf(err, errlen, "the image has no layers");
		goto out;
	}
	if ((int64_t)unpacked > api->images_max) {
		snprintf(err, errlen,
		         "its layers take %" PRIu64 " bytes unpacked, over "
		         "images_max_bytes (%" PRId64 ")",
		         unpacked, api->images_max);
		goto out;
	}
	*ret = json_pack("{s:s,s:s+,s:s+,s:O,s:I,s:I}", "name", im->name,
	                 "manifest", "sha256:", mhex, "config", "sha256:", chex,
	                 "layers", out_layers, "size", (json_int_t)total,
	                 "unpacked_size", (json_int_t)unpacked);
	r = 0;
out:
	json_decref(out_layers);
	json_decref(seen);
	json_decref(layout);
	json_decref(index);
	json_decref(man);
	json_decref(cfg);
	return r;
}

static json_t *image_item(struct call *c, const char *name, json_t *o)
{
	json_t *by = json_object_get(o, "imported_by");

	(void)c;
	return json_pack(
	    "{s:s,s:O,s:O,s:O,s:I,s:i,s:o,s:O}", "name", name, "digest",
	    json_object_get(o, "manifest"), "config",
	    json_object_get(o, "config"), "size", json_object_get(o, "size"),
	    "unpacked_size",
	    json_integer_value(json_object_get(o, "unpacked_size")), "layers",
	    (int)json_array_size(json_object_get(o, "layers")), "created_at",
	    cnl_api_time_json(
	        json_integer_value(json_object_get(o, "created_ms"))),
	    "imported_by", by ? by : json_null());
}

/* PUT /v1/images?name=N: the end of an import (the sink read the body). */
void cnl_api_h_image_import(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	struct import *im = (struct import *)req->sink;
	struct cnl_store_doc old = {0};
	char err[512];
	json_t *o = NULL, *l;
	bool replaced = false;
	size_t i;
	int r;

	if (!im) {
		cnl_http_error(resp, 500, "internal", "no import");
		return;
	}
	snprintf(c->target, sizeof(c->target), "%.120s", im->name);
	if (im->tar.failed || im->werr) {
		cnl_http_error(
		    resp, im->werr ? 507 : 400,
		    im->werr ? "insufficient_storage" : "bad_archive",
		    "image %s: %s; nothing stored", im->name,
		    im->tar.err[0] ? im->tar.err : strerror(im->werr));
		return;
	}
	if (im->too_much || im->got != im->declared) {
		cnl_http_error(resp, 400, "bad_request",
		               "image %s: %s bytes came than were announced "
		               "(%" PRIu64 "); nothing stored",
		               im->name, im->too_much ? "more" : "fewer",
		               im->declared);
		return;
	}
	if (cnl_tar_finish(&im->tar) < 0 ||
	    import_check(c->api, im, &o, err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_archive",
		               "image %s: %s; nothing stored", im->name,
		               im->tar.failed ? im->tar.err : err);
		return;
	}
	if ((r = keep_blob(c->api, im,
	                   cnl_digest_hex(json_string_value(
	                       json_object_get(o, "manifest"))))) < 0 ||
	    (r = keep_blob(c->api, im,
	                   cnl_digest_hex(json_string_value(
	                       json_object_get(o, "config"))))) < 0)
		goto fail;
	json_array_foreach (json_object_get(o, "layers"), i, l) {
		if ((r = keep_blob(c->api, im,
		                   cnl_digest_hex(json_string_value(
		                       json_object_get(l, "digest"))))) < 0)
			goto fail;
	}
	json_object_set_new(o, "created_ms", json_integer(c->now_ms));
	json_object_set_new(o, "imported_by", json_string(c->user.name));
	/* A name imported again points at the new image.  Its document's id
	 * is the name. */
	replaced =
	    cnl_store_doc_get(c->api->store, "image", im->name, &old) == 0;
	cnl_store_doc_done(&old);
	if ((r = cnl_api_doc_save(c, "image", im->name, "", "", o, !replaced)) <
	    0) {
		json_decref(o);
		images_gc(c->api);
		cnl_api_store_error(c, resp, r, "image");
		return;
	}
	if (replaced)
		images_gc(c->api);
	cnl_log(CNL_LOG_INFO, "image imported", "name=%s manifest=%s blobs=%d",
	        im->name, json_string_value(json_object_get(o, "manifest")),
	        im->blobs);
	cnl_http_reply(resp, replaced ? 200 : 201, image_item(c, im->name, o));
	json_decref(o);
	return;
fail:
	json_decref(o);
	images_gc(c->api);
	cnl_api_storage_full(resp, c->api->files_dir,
	                     "image %s: cannot store it: %s; nothing stored",
	                     im->name, strerror(-r));
}

/* GET /v1/images: every image, and the built-in "host". */
void cnl_api_h_images_list(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_doc *d = cnl_xcalloc(IMAGES_LIST, sizeof(*d));
	json_t *items = json_array();
	int n = 0, r;

	(void)req;
	if ((r = cnl_store_doc_list(c->api->store, "image", "", NULL,
	                            IMAGES_LIST, d, &n)) < 0) {
		free(d);
		json_decref(items);
		cnl_api_store_error(c, resp, r, "image");
		return;
	}
	for (int i = 0; i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL);

		if (o)
			json_array_append_new(items, image_item(c, d[i].id, o));
		json_decref(o);
	}
	json_array_append_new(items,
	                      json_pack("{s:s,s:b,s:s}", "name", "host",
	                                "builtin", 1, "description",
	                                "the node's own programs, read-only"));
	cnl_store_docs_done(d, n);
	free(d);
	cnl_http_reply(resp, 200,
	               json_pack("{s:o,s:n}", "items", items, "next"));
}

/* DELETE /v1/images?name=N: refused while a server names it (a server
 * starts again); pending jobs that name it fail at their start. */
void cnl_api_h_image_delete(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *q = cnl_http_query(req, "name");
	struct cnl_store_doc d = {0};
	struct cnl_store_server *v;
	char name[CNL_STORE_IMAGE_MAX];
	int n = 0, r;

	if (!q || !cnl_api_image_name(q, name, sizeof(name))) {
		cnl_api_bad(resp, "query \"name\": an image name is required");
		return;
	}
	snprintf(c->target, sizeof(c->target), "%.120s", name);
	if (strcmp(name, "host") == 0) {
		cnl_http_error(resp, 409, "builtin",
		               "\"host\" is built in and cannot be deleted");
		return;
	}
	if ((r = cnl_store_doc_get(c->api->store, "image", name, &d)) < 0) {
		if (r == -CNL_ENOTFOUND)
			cnl_http_error(resp, 404, "not_found",
			               "no image \"%s\"", name);
		else
			cnl_api_store_error(c, resp, r, "image");
		return;
	}
	v = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*v));
	r = cnl_store_server_list(c->api->store, NULL, NULL, CNL_STORE_LIST_MAX,
	                          v, &n);
	for (int i = 0; r == 0 && i < n; i++) {
		char sn[CNL_STORE_IMAGE_MAX];

		if (cnl_api_image_name(v[i].image, sn, sizeof(sn)) &&
		    strcmp(sn, name) == 0) {
			cnl_http_error(
			    resp, 409, "in_use",
			    "image %s is used by server \"%s\" (%s); "
			    "delete the server first",
			    name, v[i].name, v[i].id);
			goto out;
		}
	}
	if (r < 0 ||
	    (r = cnl_store_doc_delete(c->api->store, "image", d.id)) < 0) {
		cnl_api_store_error(c, resp, r, "image");
		goto out;
	}
	images_gc(c->api);
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:b}", "name", name, "deleted", 1));
out:
	free(v);
	cnl_store_doc_done(&d);
}

/* GET /v1/nodes/{node}/blobs/{digest}: a blob of an image, for an agent
 * filling its node's store. */
void cnl_api_h_node_blob_get(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *hex = cnl_digest_hex(cnl_http_param(req, "digest"));
	char path[4200];
	struct stat st;
	int fd;

	if (!hex) {
		cnl_api_bad(resp, "path: a blob is named sha256:<64 hex>");
		return;
	}
	c->no_audit = true;
	snprintf(path, sizeof(path), "%s/images/blobs/sha256/%s",
	         c->api->files_dir ? c->api->files_dir : "", hex);
	if (!c->api->files_dir ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		cnl_http_error(resp, 404, "not_found", "no blob sha256:%s",
		               hex);
		return;
	}
	if (fstat(fd, &st) < 0) {
		close(fd);
		cnl_http_error(resp, 500, "internal", "blob unreadable");
		return;
	}
	resp->status = 200;
	resp->send_file = true;
	resp->file_fd = fd;
	resp->file_size = (uint64_t)st.st_size;
	resp->content_type = "application/octet-stream";
	snprintf(resp->sha256, sizeof(resp->sha256), "%s", hex);
}

/* At start: what an import cut short by a crash left. */
void cnl_api_images_start(struct cnl_api *api)
{
	char dir[4096];
	int fd;

	if (images_dir(api, NULL, dir, sizeof(dir)) < 0)
		return;
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		cnl_api_remove_tree_at(fd, "tmp");
		close(fd);
	}
}
