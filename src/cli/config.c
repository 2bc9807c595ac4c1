/*
 * config.c - the cnlab settings file (see config.h).
 */
#include "cli/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 1;
	char *s = cnl_xmalloc(n);

	snprintf(s, n, "%s%s", a, b);
	return s;
}

char *cnl_cli_config_path(void)
{
	const char *v = getenv("CNLAB_CONFIG");

	if (v && *v)
		return cnl_xstrdup(v);
	v = getenv("XDG_CONFIG_HOME");
	if (v && *v)
		return join(v, "/cnlab/config.json");
	v = getenv("HOME");
	if (v && *v)
		return join(v, "/.config/cnlab/config.json");
	return NULL;
}

void cnl_cli_config_set(char **field, const char *v)
{
	/* Copy first: @v may be the very string being replaced. */
	char *old = *field;

	*field = v ? cnl_xstrdup(v) : NULL;
	free(old);
}

void cnl_cli_config_done(struct cnl_cli_config *c)
{
	free(c->path);
	free(c->server);
	free(c->token);
	free(c->project);
	memset(c, 0, sizeof(*c));
}

int cnl_cli_config_load(const char *path, struct cnl_cli_config *ret,
                        bool *warned, char *err, size_t errlen)
{
	static const char *const fields[] = {"server", "token", "project",
	                                     NULL};
	static const char *const keys[] = {"server", "token", "project"};
	struct cnl_cli_config c = {0};
	struct stat st;
	json_t *j;
	int r;

	*warned = false;
	memset(ret, 0, sizeof(*ret));
	ret->path = cnl_xstrdup(path);
	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return r;
	}
	if (st.st_mode & 077) {
		if (chmod(path, 0600) < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: cannot set mode 0600: %s",
			         path, strerror(errno));
			return r;
		}
		*warned = true;
	}
	if ((r = cnl_json_load_file(path, &j, err, errlen)) < 0)
		return r;
	if (!json_is_object(j) ||
	    (r = cnl_json_check_fields(j, fields, err, errlen)) < 0) {
		json_decref(j);
		if (!r)
			snprintf(err, errlen, "%s: not a JSON object", path);
		return -CNL_EPARSE;
	}
	for (size_t i = 0; i < CNL_ARRAY_SIZE(keys); i++) {
		const char *v = NULL;

		if (cnl_json_get_string(j, keys[i], false, &v, err, errlen) <
		    0) {
			json_decref(j);
			cnl_cli_config_done(&c);
			return -CNL_EPARSE;
		}
		if (v)
			cnl_cli_config_set(i == 0   ? &c.server
			                   : i == 1 ? &c.token
			                            : &c.project,
			                   v);
	}
	json_decref(j);
	c.path = ret->path;
	*ret = c;
	return 0;
}

/* mkdir -p for the folders above @path, each new one with mode 0700. */
static int make_parents(const char *path)
{
	_cleanup_free_ char *d = cnl_xstrdup(path);

	for (char *p = d + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(d, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

int cnl_cli_config_save(const struct cnl_cli_config *c, char *err,
                        size_t errlen)
{
	json_t *j = json_object();
	_cleanup_free_ char *tmp = join(c->path, ".tmp");
	char *text;
	size_t n;
	int fd, r = 0;

	if (c->server)
		json_object_set_new(j, "server", json_string(c->server));
	if (c->token)
		json_object_set_new(j, "token", json_string(c->token));
	if (c->project)
		json_object_set_new(j, "project", json_string(c->project));
	text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(j);
	if (!text)
		return -ENOMEM;
	n = strlen(text);
	if ((r = make_parents(c->path)) < 0) {
		snprintf(err, errlen, "%s: cannot create its folder: %s",
		         c->path, strerror(-r));
		free(text);
		return r;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	/* umask cannot widen 0600, but an inherited ACL might: be sure. */
	if (fchmod(fd, 0600) < 0 || write(fd, text, n) != (ssize_t)n ||
	    write(fd, "\n", 1) != 1 || fsync(fd) < 0) {
		r = errno ? -errno : -EIO;
		close(fd);
		unlink(tmp);
		goto fail;
	}
	if (close(fd) < 0 || rename(tmp, c->path) < 0) {
		r = -errno;
		unlink(tmp);
		goto fail;
	}
	free(text);
	return 0;
fail:
	snprintf(err, errlen, "%s: cannot write: %s", c->path, strerror(-r));
	free(text);
	return r;
}
