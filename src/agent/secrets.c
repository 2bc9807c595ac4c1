/*
 * secrets.c - a workload's secrets on its node (issue 24): fetched from
 * cnlabd when it starts (POST /v1/nodes/{node}/secrets, which checks that
 * this node runs it under that epoch and audits the use), written as files
 * on a tmpfs, never on a disk, and bind-mounted read-only at /run/secrets
 * in its container; those asked for as variables go into its environment.
 *
 * The tmpfs is <work_dir>/secrets, mounted on the first workload with
 * secrets or the first server (nosuid, nodev, noexec; 0711 root), and
 * detached when the agent exits with no workload's folder left on it;
 * otherwise it stays for the next agent, which adopts those workloads
 * (their containers see the files through it).  Each workload's folder is
 * <work_dir>/secrets/<id>: 0500 and each file 0400, both the tenant's (its
 * container uid on the host), so that no other tenant's container, whose user
 * is another host uid, can read them.  The folder goes when the workload is
 * forgotten.
 *
 * A node that runs work bare (no containers) keeps no secrets: such work
 * fails to start, saying so.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "net/client.h"

static pthread_mutex_t tmpfs_mu = PTHREAD_MUTEX_INITIALIZER;

static int write_secret(int dfd, const char *name, const uint8_t *v, size_t n,
                        uid_t uid);

void cnl_agent_secrets_dir(const struct cnl_agent *a, const char *id, char *out,
                           size_t len)
{
	snprintf(out, len, "%s/secrets%s%s", a->cfg.work_dir, id ? "/" : "",
	         id ? id : "");
}

/* The tmpfs, mounted once; 0 or a negative errno. */
static int tmpfs_ready(struct cnl_agent *a)
{
	char dir[600];
	struct statfs sf;
	int r = 0;

	cnl_agent_secrets_dir(a, NULL, dir, sizeof(dir));
	pthread_mutex_lock(&tmpfs_mu);
	if (mkdir(dir, 0711) < 0 && errno != EEXIST)
		r = -errno;
	else if (statfs(dir, &sf) < 0)
		r = -errno;
	else if (sf.f_type != TMPFS_MAGIC &&
	         mount("cnlab-secrets", dir, "tmpfs",
	               MS_NOSUID | MS_NODEV | MS_NOEXEC,
	               "size=64m,mode=0711") < 0)
		r = -errno;
	pthread_mutex_unlock(&tmpfs_mu);
	return r;
}

void cnl_agent_secrets_close(struct cnl_agent *a)
{
	char dir[600];
	struct statfs sf;
	struct dirent *e;
	bool busy = false;
	DIR *d;

	cnl_agent_secrets_dir(a, NULL, dir, sizeof(dir));
	if (statfs(dir, &sf) < 0 || sf.f_type != TMPFS_MAGIC)
		return;
	/* Workloads outlive the agent, and the next agent adopts them: a
	 * folder still there is a running workload's, whose container
	 * sees the files through this mount (its ssh sessions are written
	 * here).  The tmpfs stays then, for the next agent. */
	if ((d = opendir(dir))) {
		while (!busy && (e = readdir(d)))
			busy = e->d_name[0] != '.';
		closedir(d);
	}
	if (!busy)
		(void)umount2(dir, MNT_DETACH);
}

void cnl_agent_secrets_drop(struct cnl_agent *a, const char *id)
{
	char dir[600];

	cnl_agent_secrets_dir(a, id, dir, sizeof(dir));
	if (access(dir, F_OK) == 0)
		cnl_agent_rmtree(dir);
	cnl_agent_ssh_dir(a, id, dir, sizeof(dir));
	if (access(dir, F_OK) == 0)
		cnl_agent_rmtree(dir);
}

void cnl_agent_ssh_dir(const struct cnl_agent *a, const char *id, char *out,
                       size_t len)
{
	snprintf(out, len, "%s/secrets/%s.ssh", a->cfg.work_dir, id);
}

int cnl_agent_ssh_prepare(struct cnl_agent *a, const char *id, uid_t uid,
                          char *out, size_t len)
{
	int r;

	if ((r = tmpfs_ready(a)) < 0)
		return r;
	cnl_agent_ssh_dir(a, id, out, len);
	if (access(out, F_OK) == 0)
		cnl_agent_rmtree(out);
	if (mkdir(out, 0500) < 0 || chown(out, uid, uid) < 0)
		return -errno;
	return 0;
}

int cnl_agent_ssh_file(const char *dir, const char *name, const char *text,
                       uid_t uid)
{
	char tmp[700], path[700];
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int r;

	if (dfd < 0)
		return -errno;
	snprintf(tmp, sizeof(tmp), ".%s.%d", name, (int)gettid());
	snprintf(path, sizeof(path), "%s", name);
	(void)unlinkat(dfd, tmp, 0);
	r = write_secret(dfd, tmp, (const uint8_t *)text, strlen(text), uid);
	if (r == 0 && renameat(dfd, tmp, dfd, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlinkat(dfd, tmp, 0);
	close(dfd);
	return r;
}

/* Write @n bytes of @v as @dir/@name, 0400, @uid's. */
static int write_secret(int dfd, const char *name, const uint8_t *v, size_t n,
                        uid_t uid)
{
	int fd =
	    openat(dfd, name,
	           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
	size_t off = 0;
	int r = 0;

	if (fd < 0)
		return -errno;
	while (off < n) {
		ssize_t w = write(fd, v + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			r = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (r == 0 && (fchown(fd, uid, uid) < 0 || fchmod(fd, 0400) < 0))
		r = -errno;
	close(fd);
	return r;
}

int cnl_agent_secrets_fetch(struct cnl_agent *a, struct cnl_client *cl,
                            const struct wk *w, uid_t uid,
                            struct cnl_agent_secrets *ret, char *why,
                            size_t whylen)
{
	char route[256], err[512], dir[600];
	json_t *reply = NULL, *it;
	size_t i;
	long st;
	int dfd = -1, r;

	memset(ret, 0, sizeof(*ret));
	if (a->cfg.bare) {
		snprintf(why, whylen,
		         "it asks for secrets, and this node runs work bare "
		         "(no containers): it keeps no secrets");
		return -EPERM;
	}
	if ((r = tmpfs_ready(a)) < 0) {
		snprintf(why, whylen,
		         "cannot keep its secrets: no tmpfs at %s/secrets: %s",
		         a->cfg.work_dir, strerror(-r));
		return r;
	}
	snprintf(route, sizeof(route),
	         "/v1/nodes/%s/secrets?job=%s&epoch=%" PRId64, a->node_id,
	         w->id, w->epoch);
	st = cnl_client_call(cl, "POST", route, NULL, 30, &reply, err,
	                     sizeof(err));
	if (st != 200) {
		/* cnlabd's words, without the route (the job's message is
		 * short). */
		const char *m = strstr(err, "/secrets?");

		m = m ? strstr(m, ": ") : NULL;
		json_decref(reply);
		snprintf(why, whylen, "cannot fetch its secrets: %s",
		         m ? m + 2 : err);
		return st < 0 ? (int)st : -EIO;
	}
	/* A fresh folder: what an earlier run of the id left goes. */
	cnl_agent_secrets_drop(a, w->id);
	cnl_agent_secrets_dir(a, w->id, dir, sizeof(dir));
	if (mkdir(dir, 0700) < 0 ||
	    (dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) <
	        0) {
		r = -errno;
		snprintf(why, whylen, "cannot create %s: %s", dir,
		         strerror(-r));
		goto out;
	}
	json_array_foreach (json_object_get(reply, "items"), i, it) {
		const char *name =
		    json_string_value(json_object_get(it, "name"));
		const char *env = json_string_value(json_object_get(it, "env"));
		const char *b64 =
		    json_string_value(json_object_get(it, "value_base64"));
		uint8_t *v = NULL;
		size_t n = 0;

		/* The server checked the names; a file name all the same. */
		if (!name || !b64 || !name[0] || strchr(name, '/') ||
		    name[0] == '.' || i >= CNL_WIRE_SECRETS_MAX ||
		    cnl_b64_decode_new(b64, CNL_B64_STD | CNL_B64_PAD,
		                       64 * 1024, &v, &n) < 0) {
			r = -EPROTO;
			snprintf(why, whylen,
			         "its secrets: cnlabd's reply does not decode");
			goto out;
		}
		r = write_secret(dfd, name, v, n, uid);
		if (r == 0 && env) {
			if (memchr(v, '\0', n)) {
				r = -EINVAL;
				snprintf(why, whylen,
				         "secret \"%s\" holds a NUL byte: it "
				         "cannot be the variable %s (use its "
				         "file, /run/secrets/%s)",
				         name, env, name);
			} else if (asprintf(&ret->env[ret->n_env], "%s=%s", env,
			                    (const char *)v) < 0) {
				r = -ENOMEM;
				snprintf(why, whylen, "out of memory");
			} else {
				ret->n_env++;
			}
		} else if (r < 0) {
			snprintf(why, whylen, "cannot write secret \"%s\": %s",
			         name, strerror(-r));
		}
		explicit_bzero(v, n);
		free(v);
		if (r < 0)
			goto out;
	}
	if (fchown(dfd, uid, uid) < 0 || fchmod(dfd, 0500) < 0) {
		r = -errno;
		snprintf(why, whylen, "cannot hand %s to the tenant: %s", dir,
		         strerror(-r));
		goto out;
	}
	snprintf(ret->dir, sizeof(ret->dir), "%s", dir);
	r = 0;
out:
	if (dfd >= 0)
		close(dfd);
	cnl_json_wipe(reply); /* the reply's copies of the values */
	json_decref(reply);
	if (r < 0) {
		cnl_agent_secrets_done(ret);
		cnl_agent_secrets_drop(a, w->id);
	}
	return r;
}

void cnl_agent_secrets_done(struct cnl_agent_secrets *s)
{
	for (int i = 0; i < s->n_env; i++) {
		explicit_bzero(s->env[i], strlen(s->env[i]));
		free(s->env[i]);
	}
	s->n_env = 0;
}
