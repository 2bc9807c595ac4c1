/*
 * credential.c - the node's identity: the credential bound to this node
 * that every request to cnlabd carries, where it is kept, and its
 * rotation.
 *
 * CNLAB_AGENT_TOKEN holds a one-time join token ("cnlj_…", made by an
 * administrator for this node's name) or a node credential ("cnln_…",
 * which the all-in-one hands its embedded agent).  The first registration
 * exchanges a join token for the node's credential, which is written to
 * <work_dir>/node.credential (0600, through a temporary file renamed
 * over it, so that a crash leaves the old or the new one, never half of
 * one).  Later starts use that file: a restart needs no new join token.
 * When cnlabd refuses the stored credential (revoked) and the
 * environment holds a join token (a new one, for a re-join), the agent
 * registers with that.
 *
 * Rotation: after a good heartbeat, once rotate_s has passed since the
 * last rotation (or on SIGHUP), the heartbeat thread asks cnlabd for a
 * new credential, writes it, then hands it to every client: all four
 * clients ask cnl_agent_token_fn() for the bearer before each request,
 * under cred_mu.  cnlabd keeps the old one valid for a short overlap, so
 * requests in flight on the other threads succeed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "common/log.h"
#include "common/time.h"

#define JOIN_PREFIX "cnlj_"
#define CRED_PREFIX "cnln_"

void cnl_agent_token_fn(void *ud, char *buf, size_t len)
{
	struct cnl_agent *a = ud;

	pthread_mutex_lock(&a->cred_mu);
	snprintf(buf, len, "%s", a->cred);
	pthread_mutex_unlock(&a->cred_mu);
}

static void cred_path(const struct cnl_agent *a, char *buf, size_t len)
{
	snprintf(buf, len, "%s/node.credential", a->cfg.work_dir);
}

/* Write @cred to the credential file: 0 or -errno. */
static int cred_save(struct cnl_agent *a, const char *cred)
{
	char path[600], tmp[620];
	size_t n = strlen(cred);
	int fd, r = 0;

	cred_path(a, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	          0600);
	if (fd < 0)
		return -errno;
	if (write(fd, cred, n) != (ssize_t)n || write(fd, "\n", 1) != 1 ||
	    fsync(fd) < 0)
		r = errno ? -errno : -EIO;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	/* The rename lasts once the folder is on disk. */
	if ((fd = open(a->cfg.work_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >=
	    0) {
		fsync(fd);
		close(fd);
	}
	return 0;
}

/* The credential file's content into @buf: 0, or -errno. */
static int cred_load(struct cnl_agent *a, char *buf, size_t len)
{
	char path[600];
	ssize_t n;
	int fd;

	cred_path(a, path, sizeof(path));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -EINVAL;
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	return strncmp(buf, CRED_PREFIX, strlen(CRED_PREFIX)) == 0 ? 0
	                                                           : -EINVAL;
}

static void cred_set(struct cnl_agent *a, const char *cred)
{
	pthread_mutex_lock(&a->cred_mu);
	snprintf(a->cred, sizeof(a->cred), "%s", cred);
	pthread_mutex_unlock(&a->cred_mu);
}

int cnl_agent_cred_init(struct cnl_agent *a, char *err, size_t errlen)
{
	const char *t = a->cfg.token;
	char stored[CNL_WIRE_CRED_MAX];
	int r;

	pthread_mutex_init(&a->cred_mu, NULL);
	if (t && strncmp(t, CRED_PREFIX, strlen(CRED_PREFIX)) == 0) {
		/* Handed a credential (the all-in-one): keep it. */
		cred_set(a, t);
		if ((r = cred_save(a, t)) < 0) {
			snprintf(err, errlen, "%s/node.credential: %s",
			         a->cfg.work_dir, strerror(-r));
			return r;
		}
		return 0;
	}
	if (t && t[0])
		snprintf(a->join, sizeof(a->join), "%s", t);
	if (cred_load(a, stored, sizeof(stored)) == 0) {
		cred_set(a, stored);
		explicit_bzero(stored, sizeof(stored));
		return 0;
	}
	if (!a->join[0]) {
		snprintf(err, errlen,
		         "no node credential in %s/node.credential: set "
		         "CNLAB_AGENT_TOKEN to a join token (an administrator "
		         "makes one: cnlab node join-token --node NAME)",
		         a->cfg.work_dir);
		return -EINVAL;
	}
	cred_set(a, a->join);
	return 0;
}

bool cnl_agent_cred_rejoin(struct cnl_agent *a)
{
	bool switched;

	pthread_mutex_lock(&a->cred_mu);
	switched = a->join[0] && strcmp(a->cred, a->join) != 0;
	if (switched)
		snprintf(a->cred, sizeof(a->cred), "%s", a->join);
	pthread_mutex_unlock(&a->cred_mu);
	if (switched)
		cnl_log(CNL_LOG_WARN,
		        "stored node credential refused; "
		        "joining with CNLAB_AGENT_TOKEN",
		        "node=%s", a->cfg.name);
	return switched;
}

int cnl_agent_cred_take(struct cnl_agent *a, const char *cred)
{
	int r = cred_save(a, cred);

	/* Used even when it could not be written: the one it replaces
	 * dies with the overlap anyway. */
	cred_set(a, cred);
	if (r < 0)
		cnl_log(CNL_LOG_ERROR, "cannot store the node credential",
		        "path=%s/node.credential err=\"%s\"", a->cfg.work_dir,
		        strerror(-r));
	return r;
}

void cnl_agent_rotate(struct cnl_agent *a)
{
	a->rotate_now = true;
}

void cnl_agent_cred_upkeep(struct cnl_agent *a, struct cnl_client *cl)
{
	int64_t now = cnl_time_now_ms();
	struct cnl_wire_credential m;
	char route[256], err[256], q[300];
	json_t *reply = NULL;
	long st;

	if (!a->rotate_now && (a->cfg.rotate_s <= 0 || now < a->next_rotate_ms))
		return;
	a->rotate_now = false;
	snprintf(route, sizeof(route), "/v1/nodes/%s/credential", a->node_id);
	st = cnl_client_call(cl, "POST", route, NULL, 10, &reply, err,
	                     sizeof(err));
	if (st == 200 &&
	    cnl_wire_credential_decode(reply, &m, err, sizeof(err)) == 0) {
		cnl_agent_cred_take(a, m.credential);
		explicit_bzero(&m, sizeof(m));
		a->next_rotate_ms = now + a->cfg.rotate_s * 1000;
		cnl_log(CNL_LOG_INFO, "node credential rotated", "node=%s",
		        a->cfg.name);
	} else {
		/* Tried again in a minute (or the next heartbeat, if
		 * sooner rotations are due). */
		a->next_rotate_ms = now + 60 * 1000;
		cnl_log(CNL_LOG_WARN, "node credential not rotated",
		        "status=%ld err=%s", st,
		        cnl_log_quote(q, sizeof(q), err));
	}
	json_decref(reply);
}
