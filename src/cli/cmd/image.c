/*
 * image.c - cnlab image import|list|delete: the container images the
 * platform's workloads run (an administrator imports and deletes them;
 * everyone lists them).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

static int import_file(struct cnl_cli *cli, const char *file);

/* @n bytes for humans: 1.2 GB, 340 MB, 12 kB. */
static void size_text(int64_t n, char *buf, size_t len)
{
	static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
	double v = (double)n;
	size_t u = 0;

	while (v >= 1000 && u + 1 < CNL_ARRAY_SIZE(unit)) {
		v /= 1000;
		u++;
	}
	snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
}

/* skopeo's transports: a source that names one is not a local archive. */
static bool is_transport(const char *src)
{
	static const char *const t[] = {
	    "docker://", "docker-archive:", "oci:", "oci-archive:",
	    "dir:",      "docker-daemon:"};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(t); i++)
		if (strncmp(src, t[i], strlen(t[i])) == 0)
			return true;
	return false;
}

/*
 * @src (a registry's docker://REF, a docker-archive:...) as an OCI archive
 * in @out, tagged @tag, by skopeo (its credentials: ~/.docker/config.json
 * or $REGISTRY_AUTH_FILE, as skopeo login writes them).  0 or an exit
 * code after a message.
 */
static int fetch_with_skopeo(struct cnl_cli *cli, const char *src,
                             const char *out, const char *tag)
{
	char dest[600];
	const char *argv[8];
	int n = 0, st;
	pid_t pid;

	snprintf(dest, sizeof(dest), "oci-archive:%s:%s", out, tag);
	argv[n++] = "skopeo";
	argv[n++] = "copy";
	argv[n++] = "--quiet";
	if (cnl_cli_flag(cli, "insecure"))
		argv[n++] = "--src-tls-verify=false";
	argv[n++] = src;
	argv[n++] = dest;
	argv[n] = NULL;
	fprintf(stderr, "✓ Fetching %s with skopeo...\n", src);
	pid = fork();
	if (pid == 0) {
		dup2(2, 1);
		execvp("skopeo", (char *const *)argv);
		fprintf(stderr,
		        "cnlab: %s needs skopeo on this machine (Debian: "
		        "apt-get install skopeo)\n",
		        src);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot run skopeo: %s",
		                    strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) == 127)
		return CNL_EXIT_ERROR;
	if (WEXITSTATUS(st) != 0)
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "skopeo could not fetch %s (its message is "
		                    "above)",
		                    src);
	return 0;
}

int cnl_cli_cmd_image_import(struct cnl_cli *cli)
{
	const char *src = cli->args.pos[0];
	char tmpdir[] = "/tmp/cnlab-image-XXXXXX", archive[64] = "";
	int code;

	if (!is_transport(src))
		return import_file(cli, src);
	if (!cnl_cli_flag(cli, "name"))
		return import_file(cli, src); /* says what is missing */
	if (!mkdtemp(tmpdir))
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot make %s: %s",
		                    tmpdir, strerror(errno));
	snprintf(archive, sizeof(archive), "%s/image.tar", tmpdir);
	{
		const char *name = cnl_cli_flag(cli, "name");
		const char *slash = strrchr(name, '/');
		const char *colon = strrchr(slash ? slash : name, ':');

		code = fetch_with_skopeo(cli, src, archive,
		                         colon ? colon + 1 : "latest");
	}
	if (code == 0)
		code = import_file(cli, archive);
	unlink(archive);
	rmdir(tmpdir);
	return code;
}

static int import_file(struct cnl_cli *cli, const char *file)
{
	const char *name = cnl_cli_flag(cli, "name");
	_cleanup_free_ char *en = NULL, *path = NULL;
	struct cnl_client_reply r;
	char what[300], size[32];
	struct stat st;
	int fd, code;

	if (!name)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "image import needs --name NAME:TAG (the "
		                    "name users give with --image, e.g. "
		                    "pytorch:2.4-cuda12.4)");
	if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE, "cannot read %s: %s", file,
		                    strerror(errno));
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "%s: not a file (an oci-archive tar, as "
		    "`skopeo copy ... oci-archive:FILE` writes)",
		    file);
	}
	en = cnl_client_url_escape(name);
	path = cnl_cli_pathf("/v1/images?name=%s", en);
	snprintf(what, sizeof(what), "image %s", name);
	code = cnl_cli_stream(cli,
	                      &(struct cnl_client_request){
	                          .method = "PUT",
	                          .path = path,
	                          .upload = true,
	                          .upload_fd = fd,
	                          .upload_size = (uint64_t)st.st_size,
	                          /* Unpacking a large image after the
	                           * last byte may take minutes. */
	                          .idle_timeout_ms = -1,
	                      },
	                      what, &r);
	close(fd);
	if (code)
		return code;
	if (cli->json) {
		cnl_cli_print_json(r.json);
	} else {
		size_text(json_integer_value(json_object_get(r.json, "size")),
		          size, sizeof(size));
		printf(
		    "✓ Imported %s (%s, %d layer%s, %.19s…)\n",
		    cnl_cli_str(r.json, "name", name), size,
		    (int)json_integer_value(json_object_get(r.json, "layers")),
		    json_integer_value(json_object_get(r.json, "layers")) == 1
		        ? ""
		        : "s",
		    cnl_cli_str(r.json, "digest", "?"));
	}
	cnl_client_reply_done(&r);
	return 0;
}

int cnl_cli_cmd_image_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/images", "images", &t, 4,
	         (const char *[]){"NAME", "SIZE", "DIGEST", "IMPORTED"}, &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char size[32] = "-", digest[24] = "built in", when[40] = "-";
		const char *at = cnl_cli_str(it, "created_at", NULL);

		if (!json_is_true(json_object_get(it, "builtin"))) {
			size_text(
			    json_integer_value(json_object_get(it, "size")),
			    size, sizeof(size));
			snprintf(digest, sizeof(digest), "%.19s",
			         cnl_cli_str(it, "digest", "?"));
			snprintf(when, sizeof(when), "%.10s by %.20s",
			         at ? at : "?",
			         cnl_cli_str(it, "imported_by", "?"));
		}
		cnl_cli_table_add(&t,
		                  (const char *[]){cnl_cli_str(it, "name", "?"),
		                                   size, digest, when});
	}
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_image_delete(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	_cleanup_free_ char *en = cnl_client_url_escape(name);
	_cleanup_free_ char *path = cnl_cli_pathf("/v1/images?name=%s", en);
	json_t *o = NULL;
	char what[300];
	int code;

	snprintf(what, sizeof(what), "image \"%s\"", name);
	code = cnl_cli_call(cli, "DELETE", path, NULL, NULL, what, &o);

	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Deleted image %s\n", cnl_cli_str(o, "name", name));
	json_decref(o);
	return 0;
}
