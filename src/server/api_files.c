/*
 * api_files.c - a job's files: artifacts and checkpoint files its agent
 * uploads, the inputs a user uploads for it, and their downloads; all
 * streamed, never held whole in memory.
 *
 * Where they live.  On disk, under the files folder of the data
 * directory (cnl_api_config.files_dir, 0700, files 0600), one folder per
 * project and in it one per job:
 *
 *   files/<project>/<job>/<blob>        artifacts, checkpoint files, inputs
 *   files/<project>/uploads/<blob>      inputs uploaded, not yet in a job
 *   files/<project>/<job>/.tmp-<blob>   a file arriving
 *
 * and described in the store, one document per file: kind "artifact",
 * "ckpt" or "input" with the id "<job>/<SHA-256 of its path>" and the job
 * as parent, kind "upload" with the upload's id and the project as
 * parent; the body {"path", "size", "sha256", "blob"} (and "user",
 * "expires_ms" for uploads).  Blobs are named at random, never after the
 * user's path, so no name a job or user chooses reaches the file system
 * of cnlabd.  A project's files go with the project (its folder is
 * removed once the store has deleted it).
 *
 * An upload, step by step (the route's body is streamed, http_server.h):
 *
 *   headers  open_sink -> authorize, check the query (job, epoch, path),
 *            Content-Length and X-Content-SHA256, the fencing epoch and
 *            the limits; open .tmp-<blob> (O_EXCL, 0600)   [API's lock]
 *   body     each chunk written and hashed                 [no lock]
 *   end      the handler: size and digest as announced?  fencing and
 *            limits again; fsync, rename into place, the document
 *            stored (a file of the same path replaced)     [API's lock]
 *
 * and whatever fails leaves nothing: the sink's free unlinks a temporary
 * file that was not renamed.  Every refusal names the file.
 *
 * Limits (cnlabd settings): artifacts_max_bytes per job for its artifacts
 * (and again for its checkpoint), inputs_max_bytes per job for its inputs;
 * at most CNL_API_FILES_PER_JOB files of each kind per job.  Uploads not
 * used by a job within CNL_API_UPLOAD_TTL_MS are deleted (checked at each
 * new upload of the project).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "common/fs.h"
#include "cnlab/errors.h"
#include "common/json.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "wire/node.h"

enum file_kind { FK_ARTIFACT, FK_CKPT, FK_INPUT, FK_UPLOAD };

static const char *const doc_kind[] = {"artifact", "ckpt", "input", "upload"};
static const char *const kind_word[] = {"artifact", "checkpoint file", "input",
                                        "upload"};

/* A file arriving (the sink of its route). */
struct upload {
	struct cnl_http_sink sink;
	enum file_kind kind;
	char project[CNL_ID_MAX], job[CNL_ID_MAX];
	int64_t epoch;
	char path[CNL_WIRE_PATH_MAX];
	char sha256[65]; /* announced */
	uint64_t declared, got;
	int fd, werr;
	bool too_much;
	EVP_MD_CTX *md;
	char blob[40];    /* its name in the job's folder */
	char rel[160];    /* <project>/<job or uploads>/<blob> */
	char tmp[4096];   /* absolute: the temporary file */
	char final[4096]; /* absolute: where it goes */
	bool kept;        /* renamed into place */
};

/* "<job>/<SHA-256 of path>": the document id of a job's file. */
static void file_doc_id(const char *job, const char *path, char *buf,
                        size_t len)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];

	SHA256((const unsigned char *)path, strlen(path), md);
	cnl_hex(md, sizeof(md), hex);
	snprintf(buf, len, "%s/%s", job, hex);
}

int cnl_api_random_name(char *buf, size_t len)
{
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd) || len < 33)
		return -EIO;
	cnl_hex(rnd, sizeof(rnd), buf);
	return 0;
}

/* mkdir @dir (0700) if missing; its parent must exist. */
static int mkdir_private(const char *dir)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* files/<project>/<sub>, made (0700) as needed, into @buf. */
static int folder(struct cnl_api *api, const char *project, const char *sub,
                  char *buf, size_t len)
{
	int r;

	if ((size_t)snprintf(buf, len, "%s/%s", api->files_dir, project) >= len)
		return -ENAMETOOLONG;
	if ((r = mkdir_private(api->files_dir)) < 0 ||
	    (r = mkdir_private(buf)) < 0)
		return r;
	if ((size_t)snprintf(buf, len, "%s/%s/%s", api->files_dir, project,
	                     sub) >= len)
		return -ENAMETOOLONG;
	return mkdir_private(buf);
}

/* Remove @dir and what is in it, following no link (unlinkat of what
 * is not a folder, recursion through O_NOFOLLOW opens). */
void cnl_api_remove_tree_at(int parent, const char *name)
{
	int fd = openat(parent, name,
	                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *e;

	if (fd < 0) {
		unlinkat(parent, name, 0);
		return;
	}
	if (!(d = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (e->d_type == DT_DIR)
			cnl_api_remove_tree_at(dirfd(d), e->d_name);
		else if (unlinkat(dirfd(d), e->d_name, 0) < 0 &&
		         errno == EISDIR)
			cnl_api_remove_tree_at(dirfd(d), e->d_name);
	}
	closedir(d);
	unlinkat(parent, name, AT_REMOVEDIR);
}

void cnl_api_files_forget_project(struct cnl_api *api, const char *project)
{
	int fd;

	if (!api->files_dir || !project[0] || strchr(project, '/') ||
	    project[0] == '.')
		return;
	if ((fd = open(api->files_dir,
	               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return;
	cnl_api_remove_tree_at(fd, project);
	close(fd);
}

/* ---- the sink ------------------------------------------------------------ */

static int sink_write(struct cnl_http_sink *s, const char *data, size_t n)
{
	struct upload *u = (struct upload *)s;

	if (n > u->declared - u->got) {
		u->too_much = true;
		return -1;
	}
	for (size_t o = 0; o < n;) {
		ssize_t w = write(u->fd, data + o, n - o);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			u->werr = w < 0 ? errno : ENOSPC;
			return -1;
		}
		o += (size_t)w;
	}
	EVP_DigestUpdate(u->md, data, n);
	u->got += n;
	return 0;
}

static void sink_free(struct cnl_http_sink *s)
{
	struct upload *u = (struct upload *)s;

	if (u->fd >= 0)
		close(u->fd);
	if (!u->kept && u->tmp[0])
		unlink(u->tmp);
	EVP_MD_CTX_free(u->md);
	free(u);
}

/* ---- limits -------------------------------------------------------------- */

/* Bytes and number of the @kind files of @job, leaving out @except (a
 * document id, or NULL).  0 or a store error. */
static int usage_of(struct call *c, const char *kind, const char *job,
                    const char *except, uint64_t *ret_bytes, int *ret_n)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char after[CNL_STORE_DOC_ID_MAX] = "";
	int n, r;

	*ret_bytes = 0;
	*ret_n = 0;
	do {
		n = 0;
		r = cnl_store_doc_list(c->api->store, kind, job,
		                       after[0] ? after : NULL,
		                       CNL_STORE_LIST_MAX, d, &n);
		if (r < 0)
			break;
		for (int i = 0; i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);

			if (!except || strcmp(d[i].id, except) != 0) {
				*ret_bytes += (uint64_t)json_integer_value(
				    json_object_get(o, "size"));
				(*ret_n)++;
			}
			json_decref(o);
		}
		if (n)
			snprintf(after, sizeof(after), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
	} while (n == CNL_STORE_LIST_MAX);
	free(d);
	return r < 0 ? r : 0;
}

/* Whether @u fits its limits, with what is stored already (a file of the
 * same path it replaces left out).  0, or -1 with the error in @resp. */
static int check_limits(struct call *c, const struct upload *u,
                        struct cnl_http_response *resp)
{
	char id[CNL_STORE_DOC_ID_MAX];
	uint64_t used = 0, max;
	int n = 0, r;
	const char *setting;

	if (u->kind == FK_UPLOAD || u->kind == FK_INPUT) {
		max = (uint64_t)c->api->inputs_max;
		setting = "inputs_max_bytes";
	} else {
		max = (uint64_t)c->api->artifacts_max;
		setting = "artifacts_max_bytes";
	}
	if (u->kind != FK_UPLOAD) {
		file_doc_id(u->job, u->path, id, sizeof(id));
		if ((r = usage_of(c, doc_kind[u->kind], u->job, id, &used,
		                  &n)) < 0) {
			cnl_api_store_error(c, resp, r, kind_word[u->kind]);
			return -1;
		}
	} else {
		uint64_t pending = 0;
		int npending = 0;

		/* A project's uploads not yet taken by a job, together: at
		 * most CNL_API_UPLOADS_FACTOR x inputs_max_bytes and as many
		 * files as one job may keep, so that no member fills the
		 * disk with uploads that wait their 24 hours. */
		if ((r = usage_of(c, "upload", u->project, NULL, &pending,
		                  &npending)) < 0) {
			cnl_api_store_error(c, resp, r, "upload");
			return -1;
		}
		if (npending >= CNL_API_FILES_PER_JOB ||
		    pending + u->declared >
		        (uint64_t)c->api->inputs_max * CNL_API_UPLOADS_FACTOR) {
			cnl_http_error(resp, 413, "payload_too_large",
			               "upload \"%s\": project %s already has "
			               "%d uploads of %" PRIu64
			               " bytes waiting for a job (at most %d "
			               "files and %d x inputs_max_bytes)",
			               u->path, u->project, npending, pending,
			               CNL_API_FILES_PER_JOB,
			               CNL_API_UPLOADS_FACTOR);
			return -1;
		}
	}
	if (n >= CNL_API_FILES_PER_JOB) {
		cnl_http_error(resp, 413, "too_many_files",
		               "%s \"%s\": job %s already has %d %ss, the most "
		               "one job may keep",
		               kind_word[u->kind], u->path, u->job, n,
		               kind_word[u->kind]);
		return -1;
	}
	if (u->declared > max || used > max - u->declared) {
		cnl_http_error(resp, 413, "payload_too_large",
		               "%s \"%s\" is %" PRIu64 " bytes: over the "
		               "limit of %" PRIu64
		               " bytes per job (%s; %" PRIu64 " used)",
		               kind_word[u->kind], u->path, u->declared, max,
		               setting, used);
		return -1;
	}
	return 0;
}

/* ---- opening an upload (with the headers, under the API's lock) ---------- */

/* The query's epoch; -1 when absent or malformed. */
static int64_t query_epoch(struct cnl_http_request *req)
{
	const char *qe = cnl_http_query(req, "epoch");
	char *end;
	long long v;

	if (!qe)
		return -1;
	errno = 0;
	v = strtoll(qe, &end, 10);
	return errno || end == qe || *end || v < 0 ? -1 : v;
}

/* The query's path, checked; NULL with a 400 in @resp. */
static const char *query_path(struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	const char *p = cnl_http_query(req, "path");
	char why[128];

	if (!p) {
		cnl_http_error(resp, 400, "bad_request",
		               "query \"path\": required (the file's path, "
		               "relative, URL-encoded)");
		return NULL;
	}
	if (cnl_wire_path_check(p, why, sizeof(why)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "query \"path\": %s",
		               why);
		return NULL;
	}
	return p;
}

int cnl_api_open_upload(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp,
                        struct cnl_http_sink **ret)
{
	const char *node =
	    c->collect_node[0] ? c->collect_node : cnl_http_param(req, "node");
	const char *cl = cnl_http_header(req, "Content-Length");
	const char *sha = cnl_http_header(req, "X-Content-SHA256");
	const char *path, *job = NULL;
	struct upload *u;
	char dir[4096], *end;
	unsigned long long v;
	int r;

	if (!c->api->files_dir) {
		cnl_http_error(resp, 503, "no_storage",
		               "this cnlabd keeps no files (it has no data "
		               "directory)");
		return -1;
	}
	if (!(path = query_path(req, resp)))
		return -1;
	u = cnl_xcalloc(1, sizeof(*u));
	u->fd = -1;
	u->sink.write = sink_write;
	u->sink.free = sink_free;
	snprintf(u->path, sizeof(u->path), "%s", path);
	if (c->route->handler == cnl_api_h_upload_put) {
		u->kind = FK_UPLOAD;
		snprintf(u->project, sizeof(u->project), "%s", c->project.id);
	} else {
		struct cnl_store_job jb;

		u->kind = c->route->handler == cnl_api_h_node_checkpoint_put
		              ? FK_CKPT
		              : FK_ARTIFACT;
		job = c->collect_node[0] ? cnl_http_param(req, "job")
		                         : cnl_http_query(req, "job");
		u->epoch = query_epoch(req);
		if (!job || strlen(job) >= sizeof(u->job) || u->epoch < 0) {
			cnl_http_error(resp, 400, "bad_request",
			               "query \"job\" and \"epoch\" are "
			               "required");
			goto fail;
		}
		if (cnl_ctl_fence_check(c->api->ctl, node, job, u->epoch) < 0 ||
		    cnl_store_job_get(c->api->store, job, &jb) < 0) {
			cnl_http_error(
			    resp, 409, "fenced",
			    "stale fencing epoch: this work is no "
			    "longer assigned to this node under that "
			    "epoch");
			goto fail;
		}
		snprintf(u->job, sizeof(u->job), "%s", job);
		snprintf(u->project, sizeof(u->project), "%s", jb.project_id);
	}
	if (!cl) {
		cnl_http_error(resp, 411, "length_required",
		               "%s \"%s\": Content-Length is required",
		               kind_word[u->kind], path);
		goto fail;
	}
	errno = 0;
	v = strtoull(cl, &end, 10);
	if (errno || end == cl || *end || v > INT64_MAX) {
		cnl_http_error(resp, 400, "bad_request",
		               "header Content-Length: not a size");
		goto fail;
	}
	u->declared = v;
	if (!sha || strlen(sha) != 64 ||
	    strspn(sha, "0123456789abcdef") != 64) {
		cnl_http_error(resp, 400, "bad_request",
		               "%s \"%s\": header X-Content-SHA256 must be the "
		               "file's SHA-256, 64 lower-case hex digits",
		               kind_word[u->kind], path);
		goto fail;
	}
	snprintf(u->sha256, sizeof(u->sha256), "%s", sha);
	if (check_limits(c, u, resp) < 0)
		goto fail;
	if (cnl_api_random_name(u->blob, sizeof(u->blob)) < 0) {
		cnl_http_error(resp, 500, "internal", "no randomness");
		goto fail;
	}
	r = folder(c->api, u->project, u->kind == FK_UPLOAD ? "uploads" : job,
	           dir, sizeof(dir));
	snprintf(u->rel, sizeof(u->rel), "%s/%s/%s", u->project,
	         u->kind == FK_UPLOAD ? "uploads" : job, u->blob);
	if (r == 0 && ((size_t)snprintf(u->tmp, sizeof(u->tmp), "%s/.tmp-%s",
	                                dir, u->blob) >= sizeof(u->tmp) ||
	               (size_t)snprintf(u->final, sizeof(u->final), "%s/%s",
	                                dir, u->blob) >= sizeof(u->final)))
		r = -ENAMETOOLONG;
	if (r < 0 ||
	    (u->fd = open(u->tmp,
	                  O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	                  0600)) < 0) {
		u->tmp[0] = '\0';
		cnl_api_storage_full(
		    resp, c->api->files_dir, "%s \"%s\": cannot store it: %s",
		    kind_word[u->kind], path, strerror(r < 0 ? -r : errno));
		goto fail;
	}
	if (!(u->md = EVP_MD_CTX_new()))
		abort(); /* out of memory, as cnl_xmalloc */
	EVP_DigestInit_ex(u->md, EVP_sha256(), NULL);
	*ret = &u->sink;
	return 0;
fail:
	sink_free(&u->sink);
	return -1;
}

/* ---- an upload's end (the handler, under the API's lock) ----------------- */

/*
 * Check what came against what was announced, then the fencing epoch and
 * the limits again (other uploads may have ended meanwhile), and move the
 * file into place.  0, or -1 with the error in @resp.
 */
static int upload_end(struct call *c, struct cnl_http_request *req,
                      struct cnl_http_response *resp, struct upload *u)
{
	const char *node =
	    c->collect_node[0] ? c->collect_node : cnl_http_param(req, "node");
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char got[65];

	snprintf(c->target, sizeof(c->target), "%.40s/%.80s",
	         u->job[0] ? u->job : u->project, u->path);
	if (u->werr) {
		cnl_api_storage_full(
		    resp, c->api->files_dir, "%s \"%s\": cannot store it: %s",
		    kind_word[u->kind], u->path, strerror(u->werr));
		return -1;
	}
	if (u->too_much || u->got != u->declared) {
		cnl_http_error(resp, 400, "bad_request",
		               "%s \"%s\": %s bytes came, %" PRIu64
		               " were announced",
		               kind_word[u->kind], u->path,
		               u->too_much ? "more" : "fewer", u->declared);
		return -1;
	}
	EVP_DigestFinal_ex(u->md, md, &mdlen);
	cnl_hex(md, mdlen, got);
	if (strcmp(got, u->sha256) != 0) {
		cnl_http_error(resp, 400, "digest_mismatch",
		               "%s \"%s\": its SHA-256 is %s, not %s as "
		               "announced; nothing stored",
		               kind_word[u->kind], u->path, got, u->sha256);
		return -1;
	}
	if (u->kind != FK_UPLOAD &&
	    cnl_ctl_fence_check(c->api->ctl, node, u->job, u->epoch) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this work is no longer "
		               "assigned to this node under that epoch");
		return -1;
	}
	if (check_limits(c, u, resp) < 0)
		return -1;
	if (fsync(u->fd) < 0 || rename(u->tmp, u->final) < 0) {
		cnl_api_storage_full(
		    resp, c->api->files_dir, "%s \"%s\": cannot store it: %s",
		    kind_word[u->kind], u->path, strerror(errno));
		return -1;
	}
	u->kept = true;
	return 0;
}

/* The blob of document @kind/@id, unlinked (a replaced or deleted file). */
static void unlink_blob_of(struct cnl_api *api, json_t *o)
{
	const char *rel = json_string_value(json_object_get(o, "blob"));
	char path[4096];

	if (!rel || strstr(rel, "..") || rel[0] == '/')
		return;
	snprintf(path, sizeof(path), "%s/%s", api->files_dir, rel);
	unlink(path);
}

/* PUT /v1/nodes/{node}/artifacts and /checkpoints: a job's file, from
 * its agent; a file of the same path is replaced. */
static void node_file_put(struct call *c, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct upload *u = (struct upload *)req->sink;
	char id[CNL_STORE_DOC_ID_MAX];
	json_t *o, *old = NULL;
	struct cnl_wire_file f = {0};
	int r;

	if (!u) {
		cnl_http_error(resp, 500, "internal", "no upload");
		return;
	}
	if (upload_end(c, req, resp, u) < 0)
		return;
	file_doc_id(u->job, u->path, id, sizeof(id));
	cnl_api_doc_json(c->api->store, doc_kind[u->kind], id, &old);
	o = json_pack("{s:s,s:I,s:s,s:s,s:I}", "path", u->path, "size",
	              (json_int_t)u->got, "sha256", u->sha256, "blob", u->rel,
	              "epoch", (json_int_t)u->epoch);
	r = cnl_api_doc_save(c, doc_kind[u->kind], id, u->job, "", o, false);
	json_decref(o);
	if (r < 0) {
		unlink(u->final);
		json_decref(old);
		cnl_api_store_error(c, resp, r, kind_word[u->kind]);
		return;
	}
	if (old)
		unlink_blob_of(c->api, old);
	json_decref(old);
	snprintf(f.path, sizeof(f.path), "%s", u->path);
	f.size = (int64_t)u->got;
	snprintf(f.sha256, sizeof(f.sha256), "%s", u->sha256);
	cnl_http_reply(resp, 201, cnl_wire_file_encode(&f));
}

void cnl_api_h_node_artifact_put(void *call, struct cnl_http_request *req,
                                 struct cnl_http_response *resp)
{
	node_file_put(call, req, resp);
}

void cnl_api_h_job_collect_put(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	node_file_put(call, req, resp);
}

/* The collector's credential of @req: "TOKEN:POD-TOKEN" split (NUL
 * where the colon was, in @buf), its SHA-256 into @digest.  Whether it
 * has that form. */
static bool collect_cred(struct cnl_http_request *req, char *buf, size_t len,
                         const char **pod, unsigned char digest[32])
{
	const char *h = cnl_http_header(req, "Authorization");
	char *colon;
	size_t n;

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	n = strlen(h + 7);
	if (n >= len)
		return false;
	SHA256((const unsigned char *)h + 7, n, digest);
	memcpy(buf, h + 7, n + 1);
	if (!(colon = strchr(buf, ':')) || !colon[1])
		return false;
	*colon = '\0';
	*pod = colon + 1;
	return true;
}

/* Whether credential @digest was found good for @job @epoch a short while
 * ago (and so, with @add, it is now). */
static bool collect_seen(struct cnl_api *api, const unsigned char digest[32],
                         const char *job, int64_t epoch, bool add)
{
	int64_t now = cnl_time_now_ms();
	struct cnl_api_collect_seen *old = &api->collect_seen[0];
	bool found = false;

	pthread_mutex_lock(&api->collect_mu);
	for (int i = 0; i < CNL_API_COLLECT_CACHE && !found; i++) {
		struct cnl_api_collect_seen *e = &api->collect_seen[i];

		if (e->until_ms > now && e->epoch == epoch &&
		    strcmp(e->job, job) == 0 &&
		    CRYPTO_memcmp(e->digest, digest, 32) == 0) {
			found = true;
			old = e;
		} else if (e->until_ms < old->until_ms) {
			old = e;
		}
	}
	if (add) { /* over the oldest, or refreshed */
		memcpy(old->digest, digest, 32);
		snprintf(old->job, sizeof(old->job), "%s", job);
		old->epoch = epoch;
		old->until_ms = now + CNL_API_COLLECT_KEEP_MS;
	}
	pthread_mutex_unlock(&api->collect_mu);
	return found;
}

void cnl_api_collect_check(struct call *c, struct cnl_http_request *req)
{
	struct cnl_api *api = c->api;
	const char *job = cnl_http_param(req, "job"), *pod = NULL;
	int64_t epoch = query_epoch(req);
	unsigned char digest[32];
	char buf[CNL_CLIENT_TOKEN_MAX + 1];
	int r = -1;

	c->collect_why[0] = '\0';
	if (!job || epoch < 0 ||
	    !collect_cred(req, buf, sizeof(buf), &pod, digest)) {
		explicit_bzero(buf, sizeof(buf));
		return; /* refused by cnl_api_collect_authorize */
	}
	if (collect_seen(api, digest, job, epoch, false)) {
		explicit_bzero(buf, sizeof(buf));
		return;
	}
	/* The first half first: the API server is not asked about a
	 * credential that is not even this job's. */
	if (cnl_auth_collect_check(api->key, api->keylen, job, epoch, buf)) {
		pthread_rwlock_rdlock(&api->collect_rw);
		if (api->collect_verify)
			r = api->collect_verify(api->collect_ud, job, epoch,
			                        pod, c->collect_why,
			                        sizeof(c->collect_why));
		else
			snprintf(c->collect_why, sizeof(c->collect_why),
			         "this cnlabd schedules no Kubernetes pods");
		pthread_rwlock_unlock(&api->collect_rw);
	}
	explicit_bzero(buf, sizeof(buf));
	if (r == 0)
		collect_seen(api, digest, job, epoch, true);
	else if (!c->collect_why[0])
		snprintf(c->collect_why, sizeof(c->collect_why),
		         "its pod's token could not be checked");
}

int cnl_api_collect_authorize(struct call *c, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	const char *job = cnl_http_param(req, "job"), *pod = NULL;
	int64_t epoch = query_epoch(req);
	char id[CNL_STORE_NAME_MAX], name[CNL_STORE_NAME_MAX];
	char buf[CNL_CLIENT_TOKEN_MAX + 1];
	unsigned char digest[32];
	bool good = job && epoch >= 0 &&
	            collect_cred(req, buf, sizeof(buf), &pod, digest) &&
	            cnl_auth_collect_check(c->api->key, c->api->keylen, job,
	                                   epoch, buf);

	explicit_bzero(buf, sizeof(buf));
	if (!good) {
		cnl_http_error(resp, 401, "unauthorized",
		               "a collector's credential for this job under "
		               "the epoch given (query \"epoch\") is required: "
		               "its token and its pod's, \"TOKEN:POD-TOKEN\"");
		return -1;
	}
	if (!collect_seen(c->api, digest, job, epoch, false)) {
		cnl_http_error(resp, 401, "unauthorized",
		               "the collector's pod token is refused: %s",
		               c->collect_why[0] ? c->collect_why
		                                 : "it was not checked");
		return -1;
	}
	if (cnl_ctl_job_node(c->api->ctl, job, epoch, id, name) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this job no longer runs "
		               "under that epoch");
		return -1;
	}
	snprintf(c->collect_node, sizeof(c->collect_node), "%s", id);
	snprintf(c->node, sizeof(c->node), "%s", name);
	snprintf(c->actor, sizeof(c->actor), "collector:%s@%" PRId64, job,
	         epoch);
	return 0;
}

/*
 * A pre-empted job's checkpoint travels through the control plane: its
 * agent uploads the files of CNLAB_CHECKPOINT_DIR when the job exits, and
 * the agent that runs it next (any node) downloads them before starting
 * it.  Each upload replaces the file of the same path.
 */
void cnl_api_h_node_checkpoint_put(void *call, struct cnl_http_request *req,
                                   struct cnl_http_response *resp)
{
	node_file_put(call, req, resp);
}

/* PUT /v1/projects/{project}/uploads?path=P: an input for a job to come. */
void cnl_api_h_upload_put(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	struct upload *u = (struct upload *)req->sink;
	char id[CNL_ID_MAX];
	int64_t expires = c->now_ms + CNL_API_UPLOAD_TTL_MS;
	json_t *o;
	int r;

	if (!u) {
		cnl_http_error(resp, 500, "internal", "no upload");
		return;
	}
	if (upload_end(c, req, resp, u) < 0)
		return;
	if (cnl_api_new_id(c, "upl", id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		return;
	}
	o = json_pack("{s:s,s:I,s:s,s:s,s:s,s:I}", "path", u->path, "size",
	              (json_int_t)u->got, "sha256", u->sha256, "blob", u->rel,
	              "user", c->user.id, "expires_ms", (json_int_t)expires);
	r = cnl_api_doc_save(c, "upload", id, c->project.id, "", o, true);
	json_decref(o);
	if (r < 0) {
		unlink(u->final);
		cnl_api_store_error(c, resp, r, "upload");
		return;
	}
	snprintf(c->target, sizeof(c->target), "%s", id);
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", id, "path",
	                         u->path, "size", (json_int_t)u->got, "sha256",
	                         u->sha256, "expires_at",
	                         cnl_api_time_json(expires)));
}

/* Delete the uploads of @project past their time; under the lock. */
void cnl_api_uploads_expire(struct call *c, const char *project)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	int n = 0;

	if (cnl_store_doc_list(c->api->store, "upload", project, NULL,
	                       CNL_STORE_LIST_MAX, d, &n) < 0)
		n = 0;
	for (int i = 0; i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL);

		if (o &&
		    json_integer_value(json_object_get(o, "expires_ms")) <
		        c->now_ms &&
		    cnl_store_doc_delete(c->api->store, "upload", d[i].id) == 0)
			unlink_blob_of(c->api, o);
		json_decref(o);
	}
	cnl_store_docs_done(d, n);
	free(d);
}

/* ---- what streams -------------------------------------------------------- */

bool cnl_api_route_streams(const struct cnl_http_route *route)
{
	return route->handler == cnl_api_h_node_artifact_put ||
	       route->handler == cnl_api_h_job_collect_put ||
	       route->handler == cnl_api_h_node_checkpoint_put ||
	       route->handler == cnl_api_h_upload_put;
}

/* ---- lists and downloads ------------------------------------------------- */

const char *cnl_api_node_job(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	const char *node = cnl_http_param(req, "node");
	const char *job = cnl_http_query(req, "job");
	int64_t epoch = query_epoch(req);

	if (!job || strlen(job) >= CNL_ID_MAX || epoch < 0) {
		cnl_api_bad(resp, "query \"job\" and \"epoch\" are required");
		return NULL;
	}
	if (cnl_ctl_fence_check(c->api->ctl, node, job, epoch) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this work is not assigned "
		               "to this node under that epoch");
		return NULL;
	}
	return job;
}

/* GET ?job=ID&epoch=E: the list of the job's files of @kind. */
static void node_list(struct call *c, struct cnl_http_response *resp,
                      enum file_kind kind, const char *owner)
{
	struct cnl_wire_files files = {0};
	struct cnl_store_doc *d;
	int n = 0, r;

	d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	r = cnl_store_doc_list(c->api->store, doc_kind[kind], owner, NULL,
	                       CNL_STORE_LIST_MAX, d, &n);
	if (r < 0) {
		free(d);
		cnl_api_store_error(c, resp, r, kind_word[kind]);
		return;
	}
	files.items = cnl_xcalloc((size_t)n + 1, sizeof(*files.items));
	for (int i = 0; i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL);
		struct cnl_wire_file *f = &files.items[files.n];
		const char *p = json_string_value(json_object_get(o, "path"));
		const char *h = json_string_value(json_object_get(o, "sha256"));

		if (p && h) {
			snprintf(f->path, sizeof(f->path), "%s", p);
			snprintf(f->sha256, sizeof(f->sha256), "%s", h);
			f->size =
			    json_integer_value(json_object_get(o, "size"));
			files.n++;
		}
		json_decref(o);
	}
	cnl_http_reply(resp, 200, cnl_wire_files_encode(&files));
	cnl_wire_files_done(&files);
	cnl_store_docs_done(d, n);
	free(d);
}

/* ---- retention ----------------------------------------------------------- */

static bool ended_state(const char *state)
{
	return strcmp(state, "succeeded") == 0 ||
	       strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0;
}

/* The call's job ended longer than artifacts_keep ago. */
static bool expired(const struct call *c)
{
	return c->have_job && c->api->artifacts_keep_ms > 0 &&
	       ended_state(c->job.state) &&
	       c->job.updated_ms + c->api->artifacts_keep_ms <= c->now_ms;
}

/* Delete the files of job @j (its documents, then its folder). */
static void forget_job_files(struct cnl_api *api, const struct cnl_store_job *j)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	int dfd;

	for (size_t k = 0; k < 3; k++) {
		int n = 0;

		do {
			if (cnl_store_doc_list(api->store, doc_kind[k], j->id,
			                       NULL, CNL_STORE_LIST_MAX, d,
			                       &n) < 0)
				n = 0;
			for (int i = 0; i < n; i++)
				(void)cnl_store_doc_delete(
				    api->store, doc_kind[k], d[i].id);
			cnl_store_docs_done(d, n);
		} while (n == CNL_STORE_LIST_MAX);
	}
	free(d);
	if ((dfd = open(api->files_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >=
	    0) {
		int pfd =
		    openat(dfd, j->project_id,
		           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (pfd >= 0) {
			cnl_api_remove_tree_at(pfd, j->id);
			close(pfd);
		}
		close(dfd);
	}
	cnl_log(CNL_LOG_INFO, "job files deleted", "job=%s ended_ms=%" PRId64,
	        j->id, j->updated_ms);
}

#define KEEP_ROUND 200 /* jobs looked at per round and state */

/*
 * A round of the retention sweep: for each end state, the next
 * KEEP_ROUND jobs in id order after where the last round stopped; those
 * that ended artifacts_keep ago and still have a folder lose their files.
 * At the end of the list it starts over, so a job created early that
 * ended late is found on the next pass.  Rounds come every keep/2, at
 * most a minute apart.
 */
void cnl_api_files_upkeep(void *ud, int64_t now)
{
	static const char *const ended[] = {"succeeded", "failed", "cancelled"};
	struct cnl_api *api = ud;
	int64_t keep = api->artifacts_keep_ms, gap;
	struct cnl_store_job *jobs;

	if (keep <= 0 || !api->files_dir || now < api->keep_next_ms)
		return;
	gap = keep / 2 < 1000 ? 1000 : keep / 2 > 60000 ? 60000 : keep / 2;
	api->keep_next_ms = now + gap;
	jobs = cnl_xcalloc(KEEP_ROUND, sizeof(*jobs));
	for (size_t s = 0; s < CNL_ARRAY_SIZE(ended); s++) {
		char *after = api->keep_after[s];
		int n = 0;

		if (cnl_store_job_list_state(api->store, ended[s],
		                             after[0] ? after : NULL,
		                             KEEP_ROUND, jobs, &n) < 0)
			continue;
		for (int i = 0; i < n; i++) {
			char dir[4096];
			struct stat st;

			if (jobs[i].updated_ms + keep > now)
				continue;
			snprintf(dir, sizeof(dir), "%s/%s/%s", api->files_dir,
			         jobs[i].project_id, jobs[i].id);
			if (lstat(dir, &st) == 0)
				forget_job_files(api, &jobs[i]);
		}
		if (n < KEEP_ROUND)
			after[0] = '\0'; /* the end: start over next time */
		else
			snprintf(after, CNL_ID_MAX, "%s", jobs[n - 1].id);
	}
	free(jobs);
}

/* Reply with the file of @kind at @path of @job, streamed from disk. */
static void send_file(struct call *c, struct cnl_http_response *resp,
                      enum file_kind kind, const char *job, const char *path)
{
	char id[CNL_STORE_DOC_ID_MAX], abs[4096];
	const char *rel, *sha;
	json_t *o = NULL;
	struct stat st;
	int fd, r;

	file_doc_id(job, path, id, sizeof(id));
	if ((r = cnl_api_doc_json(c->api->store, doc_kind[kind], id, &o)) < 0) {
		if (r == -CNL_ENOTFOUND && expired(c))
			cnl_http_error(resp, 404, "expired",
			               "%s \"%s\" is gone: this platform keeps "
			               "a job's files %" PRId64
			               " s after its end (artifacts_keep)",
			               kind_word[kind], path,
			               c->api->artifacts_keep_ms / 1000);
		else if (r == -CNL_ENOTFOUND)
			cnl_http_error(resp, 404, "not_found",
			               "%s \"%s\" not found", kind_word[kind],
			               path);
		else
			cnl_api_store_error(c, resp, r, kind_word[kind]);
		return;
	}
	rel = json_string_value(json_object_get(o, "blob"));
	sha = json_string_value(json_object_get(o, "sha256"));
	if (!c->api->files_dir || !rel || !sha || strstr(rel, "..") ||
	    (size_t)snprintf(abs, sizeof(abs), "%s/%s", c->api->files_dir,
	                     rel) >= sizeof(abs) ||
	    (fd = open(abs, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		cnl_http_error(resp, 500, "internal", "%s \"%s\" unreadable",
		               kind_word[kind], path);
		json_decref(o);
		return;
	}
	if (fstat(fd, &st) < 0) {
		close(fd);
		json_decref(o);
		cnl_http_error(resp, 500, "internal", "%s \"%s\" unreadable",
		               kind_word[kind], path);
		return;
	}
	resp->status = 200;
	resp->send_file = true;
	resp->file_fd = fd;
	resp->file_size = (uint64_t)st.st_size;
	resp->content_type = "application/octet-stream";
	snprintf(resp->sha256, sizeof(resp->sha256), "%s", sha);
	json_decref(o);
}

void cnl_api_node_inputs_list(struct call *c, struct cnl_http_response *resp,
                              const char *owner)
{
	node_list(c, resp, FK_INPUT, owner);
}

void cnl_api_node_input_send(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp, const char *owner)
{
	const char *path = query_path(req, resp);

	if (path)
		send_file(c, resp, FK_INPUT, owner, path);
}

void cnl_api_h_node_checkpoint_get(void *call, struct cnl_http_request *req,
                                   struct cnl_http_response *resp)
{
	const char *job = cnl_api_node_job(call, req, resp);

	if (job)
		node_list(call, resp, FK_CKPT, job);
}

void cnl_api_h_node_checkpoint_file(void *call, struct cnl_http_request *req,
                                    struct cnl_http_response *resp)
{
	const char *job = cnl_api_node_job(call, req, resp), *path;

	if (job && (path = query_path(req, resp)))
		send_file(call, resp, FK_CKPT, job, path);
}

static json_t *artifact_item(struct call *c, const struct cnl_store_doc *d,
                             json_t *body)
{
	json_object_del(body, "blob");
	json_object_del(body, "epoch");
	json_object_set_new(body, "at", cnl_api_time_json(d->updated_ms));
	return json_incref(body);
}

void cnl_api_h_job_artifacts(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_api_doc_page(c, req, resp, "artifact", c->job.id, "artifact",
	                 artifact_item);
}

/* GET /v1/jobs/{job}/artifact?path=P: the bytes, as the job wrote them. */
void cnl_api_h_job_artifact_get(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *path = query_path(req, resp);

	if (path)
		send_file(c, resp, FK_ARTIFACT, c->job.id, path);
}

/* ---- inputs of a new job ------------------------------------------------- */

/*
 * "inputs": ["upl_...", ...]: uploads of this project by this user, each
 * its own path, within inputs_max_bytes together.  Their documents into
 * *@ret (an array of the upload documents' bodies, with "id").  0, or -1
 * with a 400/404/413 in @resp.
 */
int cnl_api_job_inputs_check(struct call *c, json_t *body,
                             struct cnl_http_response *resp, json_t **ret)
{
	json_t *ids = json_object_get(body, "inputs"), *it, *out;
	uint64_t total = 0;
	size_t i;

	*ret = NULL;
	if (!ids)
		return 0;
	if (!json_is_array(ids) ||
	    json_array_size(ids) > CNL_API_INPUTS_PER_JOB) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"inputs\": must be an array of at most "
		               "%d upload ids (PUT "
		               "/v1/projects/{project}/uploads)",
		               CNL_API_INPUTS_PER_JOB);
		return -1;
	}
	out = json_array();
	json_array_foreach (ids, i, it) {
		const char *id = json_string_value(it), *p;
		json_t *o = NULL;
		size_t k;
		json_t *prev;

		if (!id || strlen(id) >= CNL_ID_MAX ||
		    cnl_api_doc_json(c->api->store, "upload", id, &o) < 0 ||
		    strcmp(json_string_value(json_object_get(o, "user")) ?: "",
		           c->user.id) != 0 ||
		    json_integer_value(json_object_get(o, "expires_ms")) <
		        c->now_ms) {
			json_decref(o);
			json_decref(out);
			cnl_http_error(
			    resp, 404, "not_found",
			    "field \"inputs[%zu]\": no upload %s of "
			    "yours in this project (uploads are kept "
			    "24 h)",
			    i, id ? id : "(not a string)");
			return -1;
		}
		{
			struct cnl_store_doc d = {0};

			/* An upload of another project is not ours. */
			if (cnl_store_doc_get(c->api->store, "upload", id, &d) <
			        0 ||
			    strcmp(d.parent, c->project.id) != 0) {
				cnl_store_doc_done(&d);
				json_decref(o);
				json_decref(out);
				cnl_http_error(
				    resp, 404, "not_found",
				    "field \"inputs[%zu]\": no upload "
				    "%s of yours in this project",
				    i, id);
				return -1;
			}
			cnl_store_doc_done(&d);
		}
		p = json_string_value(json_object_get(o, "path")) ?: "";
		json_array_foreach (out, k, prev)
			if (strcmp(json_string_value(
			               json_object_get(prev, "path")),
			           p) == 0) {
				json_decref(o);
				json_decref(out);
				cnl_http_error(resp, 400, "bad_request",
				               "field \"inputs\": two uploads "
				               "for the path \"%s\"",
				               p);
				return -1;
			}
		total +=
		    (uint64_t)json_integer_value(json_object_get(o, "size"));
		json_object_set_new(o, "id", json_string(id));
		json_array_append_new(out, o);
	}
	if (total > (uint64_t)c->api->inputs_max) {
		json_decref(out);
		cnl_http_error(resp, 413, "payload_too_large",
		               "the inputs are %" PRIu64
		               " bytes together: over "
		               "the limit of %" PRId64 " bytes per job "
		               "(inputs_max_bytes)",
		               total, c->api->inputs_max);
		return -1;
	}
	*ret = out;
	return 0;
}

/*
 * Make the uploads of @inputs (from cnl_api_job_inputs_check) inputs of
 * job @job: each blob hard-linked into the job's folder, its "input"
 * document stored, its upload document deleted; inside the caller's
 * transaction.  The uploads' own links go once the request's commit
 * stands, the job's if it was undone (cnl_api_job_inputs_done(), then
 * cnl_api_job_inputs_settle() at the request's end).  0 or a negative
 * errno / store error.
 */
int cnl_api_job_inputs_attach(struct call *c, const char *job, json_t *inputs)
{
	char dir[4096], blob[40], abs_from[4096], abs_to[4096];
	json_t *it;
	size_t i;
	int r;

	if (!inputs || !json_array_size(inputs))
		return 0;
	if ((r = folder(c->api, c->project.id, job, dir, sizeof(dir))) < 0)
		return r;
	json_array_foreach (inputs, i, it) {
		char id[CNL_STORE_DOC_ID_MAX], rel[160];
		const char *path =
		    json_string_value(json_object_get(it, "path"));
		json_t *o;

		if ((r = cnl_api_random_name(blob, sizeof(blob))) < 0)
			return r;
		if ((size_t)snprintf(
		        abs_from, sizeof(abs_from), "%s/%s", c->api->files_dir,
		        json_string_value(json_object_get(it, "blob"))) >=
		        sizeof(abs_from) ||
		    (size_t)snprintf(abs_to, sizeof(abs_to), "%s/%s", dir,
		                     blob) >= sizeof(abs_to))
			return -ENAMETOOLONG;
		snprintf(rel, sizeof(rel), "%s/%s/%s", c->project.id, job,
		         blob);
		if (link(abs_from, abs_to) < 0)
			return -errno;
		json_object_set_new(it, "linked", json_string(abs_to));
		file_doc_id(job, path, id, sizeof(id));
		o = json_pack("{s:s,s:O,s:O,s:s}", "path", path, "size",
		              json_object_get(it, "size"), "sha256",
		              json_object_get(it, "sha256"), "blob", rel);
		r = cnl_api_doc_save(c, "input", id, job, "", o, true);
		json_decref(o);
		if (r < 0)
			return r;
		if ((r = cnl_store_doc_delete(
		         c->api->store, "upload",
		         json_string_value(json_object_get(it, "id")))) < 0)
			return r;
	}
	return 0;
}

static void inputs_end(struct call *c, json_t *inputs, bool kept)
{
	json_t *it;
	size_t i;

	json_array_foreach (inputs, i, it) {
		const char *linked =
		    json_string_value(json_object_get(it, "linked"));

		if (kept)
			unlink_blob_of(c->api, it);
		else if (linked)
			unlink(linked);
	}
}

/* The handler's own commit is a savepoint's inside the request's
 * transaction, which may still fail (a full disk), or be lost with its
 * batch: the uploads' files are kept until the request's end says which.
 * A commit whose sync fails stands (the next good sync makes it durable):
 * it keeps the job's links and drops the uploads' files. */
void cnl_api_job_inputs_done(struct call *c, json_t *inputs, bool committed)
{
	if (!committed) {
		inputs_end(c, inputs, false);
		return;
	}
	json_decref(c->inputs_kept);
	c->inputs_kept = json_incref(inputs);
}

void cnl_api_job_inputs_settle(struct call *c, bool kept)
{
	if (!c->inputs_kept)
		return;
	inputs_end(c, c->inputs_kept, kept);
	json_decref(c->inputs_kept);
	c->inputs_kept = NULL;
}
