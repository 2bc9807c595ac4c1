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

/* @url without its trailing '/': the key of its entry in hosts. */
static char *host_key(const char *url)
{
	size_t n = strlen(url);

	char *k;

	while (n && url[n - 1] == '/')
		n--;
	k = cnl_xmalloc(n + 1);
	memcpy(k, url, n);
	k[n] = '\0';
	return k;
}

/* The token kept for @server in @hosts, or NULL. */
static const char *host_token(json_t *hosts, const char *server)
{
	_cleanup_free_ char *k = NULL;

	if (!hosts || !server)
		return NULL;
	k = host_key(server);
	return json_string_value(
	    json_object_get(json_object_get(hosts, k), "token"));
}

/* Put c->token in @hosts as its server's entry (none: drop the entry). */
static void stash(const struct cnl_cli_config *c, json_t *hosts)
{
	const char *s = c->token_server ? c->token_server : c->server;
	_cleanup_free_ char *k = NULL;

	if (!s)
		return;
	k = host_key(s);
	if (c->token)
		json_object_set_new(hosts, k,
		                    json_pack("{s:s}", "token", c->token));
	else
		json_object_del(hosts, k);
}

void cnl_cli_config_use_server(struct cnl_cli_config *c, const char *server)
{
	if (!c->hosts)
		c->hosts = json_object();
	stash(c, c->hosts);
	cnl_cli_config_set(&c->token, host_token(c->hosts, server));
	cnl_cli_config_set(&c->token_server, server);
}

/* Read "hosts": an object of {"token": STRING} objects; 0 or -CNL_EPARSE. */
static int load_hosts(json_t *j, const char *path, json_t **ret, char *err,
                      size_t errlen)
{
	json_t *h = json_object_get(j, "hosts"), *e;
	const char *url;

	*ret = json_object();
	if (!h)
		return 0;
	if (!json_is_object(h)) {
		snprintf(err, errlen, "%s: \"hosts\": not an object", path);
		return -CNL_EPARSE;
	}
	json_object_foreach (h, url, e) {
		json_t *t = json_object_get(e, "token");

		if (!json_is_object(e) || (t && !json_is_string(t))) {
			snprintf(err, errlen,
			         "%s: \"hosts\".\"%s\": not {\"token\": "
			         "STRING}",
			         path, url);
			return -CNL_EPARSE;
		}
		if (t) {
			_cleanup_free_ char *k = host_key(url);

			json_object_set_new(
			    *ret, k,
			    json_pack("{s:s}", "token", json_string_value(t)));
		}
	}
	return 0;
}

void cnl_cli_config_done(struct cnl_cli_config *c)
{
	free(c->path);
	free(c->server);
	free(c->token);
	free(c->token_server);
	free(c->project);
	json_decref(c->hosts);
	memset(c, 0, sizeof(*c));
}

int cnl_cli_config_load(const char *path, struct cnl_cli_config *ret,
                        bool *warned, char *err, size_t errlen)
{
	static const char *const fields[] = {"server", "token", "project",
	                                     "hosts", NULL};
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
	if ((r = load_hosts(j, path, &c.hosts, err, errlen)) < 0) {
		json_decref(j);
		cnl_cli_config_done(&c);
		return r;
	}
	json_decref(j);
	/* The top-level token is the default server's. */
	if (c.token && c.server) {
		_cleanup_free_ char *k = host_key(c.server);

		json_object_set_new(c.hosts, k,
		                    json_pack("{s:s}", "token", c.token));
	}
	cnl_cli_config_set(&c.token, host_token(c.hosts, c.server));
	cnl_cli_config_set(&c.token_server, c.server);
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
	json_t *hosts = c->hosts ? json_deep_copy(c->hosts) : json_object();
	_cleanup_free_ char *tmp = join(c->path, ".tmp");
	char *text;
	size_t n;
	int fd, r = 0;

	if (c->server)
		json_object_set_new(j, "server", json_string(c->server));
	stash(c, hosts);
	/* The default server's token at the top level, as older CLIs and
	 * scripts read it; the other servers' in hosts. */
	if (c->server) {
		_cleanup_free_ char *k = host_key(c->server);
		const char *t = host_token(hosts, c->server);

		if (t)
			json_object_set_new(j, "token", json_string(t));
		json_object_del(hosts, k);
	}
	if (json_object_size(hosts))
		json_object_set(j, "hosts", hosts);
	json_decref(hosts);
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
