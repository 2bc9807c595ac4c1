/*
 * collect.c - `cnlab-agent collect`: the collector of a Kubernetes run
 * pod's artifacts.
 *
 * cnlabd puts it in each run pod it makes as a native sidecar (an init
 * container with restartPolicy Always) of the agent's image: it mounts the
 * job's /workspace read-only and, alone of the pod's containers, the
 * Secret with its token (cnl_auth_collect_token: this job, this epoch,
 * artifacts only) and the pod's own ServiceAccount token for cnlabd
 * (projected, audience "cnlab-collect", bound to the pod by the kubelet,
 * which rotates it): its credential is "TOKEN:POD-TOKEN", the pod token
 * read again before each request, and cnlabd takes the first only in the
 * pod the second is bound to (a TokenReview), so the Secret mounted in a
 * pod of someone else's uploads nothing.  It waits; the kubelet stops a pod's
 * sidecars with SIGTERM once its containers have ended, and the collector then
 * uploads what the job left in CNLAB_ARTIFACTS_DIR exactly as an agent does
 * (cnl_agent_upload_tree: nothing followed, every file that cannot travel
 * named), to PUT /v1/jobs/{job}/collect.  A file that cannot be collected
 * makes it end with 1 and the reason in its termination message, which
 * cnlabd reads from the pod's status and ends the job with.
 *
 * Settings (environment): CNLAB_SERVER, CNLAB_JOB, CNLAB_EPOCH,
 * CNLAB_COLLECT_DIR (/workspace/artifacts), CNLAB_COLLECT_TOKEN_FILE and
 * CNLAB_COLLECT_CA_FILE (the Secret's files under /run/cnlab/collect; no
 * CA file: the system's), CNLAB_COLLECT_POD_TOKEN_FILE
 * (/run/cnlab/pod/token), CNLAB_COLLECT_MESSAGE_FILE
 * (/dev/termination-log).  `--now` collects at once instead of waiting.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "net/client.h"

#define COLLECT_SECRETS "/run/cnlab/collect"

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && v[0] ? v : dflt;
}

/* The collector's credential. */
struct cred {
	char token[256];      /* the Secret's */
	const char *pod_file; /* the pod's token, rotated by the kubelet */
};

/* The bearer before each request: "TOKEN:POD-TOKEN" ("" when the pod's
 * cannot be read: the request then goes without, and is refused). */
static void cred_fn(void *ud, char *buf, size_t len)
{
	const struct cred *c = ud;
	size_t n = strlen(c->token);
	FILE *f = fopen(c->pod_file, "re");

	buf[0] = '\0';
	if (!f)
		return;
	if (n + 1 < len) {
		memcpy(buf, c->token, n);
		buf[n] = ':';
		if (fgets(buf + n + 1, (int)(len - n - 1), f))
			buf[strcspn(buf, "\r\n")] = '\0';
		else
			buf[0] = '\0';
	}
	fclose(f);
}

/* Say why in the termination message (and on stderr); 1. */
__attribute__((format(printf, 2, 3))) static int
collect_fail(const char *msg_file, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cnlab-agent collect: %s\n", msg);
	if (msg_file && (f = fopen(msg_file, "we"))) {
		fputs(msg, f);
		fclose(f);
	}
	return 1;
}

int cnl_agent_collect_main(int argc, char **argv)
{
	const char *server = getenv("CNLAB_SERVER"), *job = getenv("CNLAB_JOB");
	const char *ep = getenv("CNLAB_EPOCH");
	const char *dir = env_or("CNLAB_COLLECT_DIR", "/workspace/artifacts");
	const char *tfile =
	    env_or("CNLAB_COLLECT_TOKEN_FILE", COLLECT_SECRETS "/token");
	const char *cafile =
	    env_or("CNLAB_COLLECT_CA_FILE", COLLECT_SECRETS "/ca.crt");
	const char *msg_file =
	    env_or("CNLAB_COLLECT_MESSAGE_FILE", "/dev/termination-log");
	struct cred cred = {
	    .pod_file =
	        env_or("CNLAB_COLLECT_POD_TOKEN_FILE", "/run/cnlab/pod/token"),
	};
	char route[256], why[768] = "", *end;
	struct cnl_client *cl = NULL;
	bool now = false;
	sigset_t set;
	int64_t epoch;
	FILE *f;
	int sig, r;

	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--now") != 0) {
			fprintf(stderr,
			        "usage: cnlab-agent collect [--now] (settings "
			        "in the environment: collect.c)\n");
			return 2;
		}
		now = true;
	}
	errno = 0;
	epoch = ep ? strtoll(ep, &end, 10) : -1;
	if (!server || !server[0] || !job || !job[0] || !ep || errno || *end ||
	    epoch < 0)
		return collect_fail(msg_file,
		                    "CNLAB_SERVER, CNLAB_JOB and CNLAB_EPOCH "
		                    "(a number) must be set");
	/* The kubelet's stop, once the job's containers have ended.  Held
	 * before anything else, so that one that comes early is not lost. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	if (!now) {
		if (sigwait(&set, &sig) != 0)
			return collect_fail(msg_file,
			                    "cannot wait for SIGTERM");
	}
	if (!(f = fopen(tfile, "re")) ||
	    !fgets(cred.token, sizeof(cred.token), f)) {
		if (f)
			fclose(f);
		return collect_fail(msg_file, "no token in %s", tfile);
	}
	fclose(f);
	cred.token[strcspn(cred.token, "\r\n")] = '\0';
	if (access(cred.pod_file, R_OK) != 0)
		return collect_fail(msg_file, "no pod token in %s: %s",
		                    cred.pod_file, strerror(errno));
	r = cnl_client_new(
	    &(struct cnl_client_config){
	        .base = server,
	        .token_fn = cred_fn,
	        .token_ud = &cred,
	        .cafile = access(cafile, R_OK) == 0 ? cafile : NULL,
	        .user_agent = "cnlab-agent-collect",
	        .connect_timeout_ms = 10000,
	        .idle_timeout_ms = 60000,
	    },
	    &cl);
	if (r < 0) {
		explicit_bzero(cred.token, sizeof(cred.token));
		return collect_fail(msg_file, "cannot make a client for %s: %s",
		                    server, strerror(-r));
	}
	snprintf(route, sizeof(route), "/v1/jobs/%s/collect?epoch=%" PRId64,
	         job, epoch);
	r = cnl_agent_upload_tree(cl, dir, route, "artifacts", job, why,
	                          sizeof(why));
	cnl_client_free(cl);
	explicit_bzero(cred.token, sizeof(cred.token));
	if (r < 0)
		return collect_fail(msg_file, "%s",
		                    why[0] ? why
		                           : "its artifacts did not all go");
	return 0;
}
