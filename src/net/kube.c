/*
 * kube.c - the Kubernetes API client (kube.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "net/client.h"
#include "net/kube.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct cnl_kube {
	struct cnl_client *cl;
	char token_file[512];
	int retries;
	long backoff_ms, timeout_ms;
};

/* The bearer, read from its file before each request. */
static void read_token(void *ud, char *buf, size_t len)
{
	const struct cnl_kube *k = ud;
	FILE *f = fopen(k->token_file, "re");
	size_t n = 0;

	buf[0] = '\0';
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
}

int cnl_kube_open(const struct cnl_kube_config *cfg, struct cnl_kube **ret,
                  char *err, size_t errlen)
{
	static const struct cnl_kube_config none;
	char server[300];
	const char *ca;
	struct cnl_kube *k;

	if (!cfg)
		cfg = &none;
	if (cfg->server && cfg->server[0]) {
		snprintf(server, sizeof(server), "%s", cfg->server);
	} else {
		const char *h = getenv("KUBERNETES_SERVICE_HOST");
		const char *p = getenv("KUBERNETES_SERVICE_PORT");

		if (!h || !h[0]) {
			cnl_seterr(err, errlen,
			           "no Kubernetes API server: not in a pod "
			           "(KUBERNETES_SERVICE_HOST unset) and none "
			           "given");
			return -CNL_ECONFIG;
		}
		/* An IPv6 service address goes in brackets. */
		snprintf(server, sizeof(server),
		         strchr(h, ':') ? "https://[%s]:%s" : "https://%s:%s",
		         h, p && p[0] ? p : "443");
	}
	k = cnl_xcalloc(1, sizeof(*k));
	snprintf(k->token_file, sizeof(k->token_file), "%s",
	         cfg->token_file ? cfg->token_file : SA_DIR "/token");
	k->retries = cfg->retries < 0 ? 0 : cfg->retries ? cfg->retries : 5;
	k->backoff_ms = cfg->backoff_ms > 0 ? cfg->backoff_ms : 200;
	k->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
	ca = cfg->cafile                         ? cfg->cafile
	     : strncmp(server, "https:", 6) == 0 ? SA_DIR "/ca.crt"
	                                         : NULL;
	cnl_client_new(&(struct cnl_client_config){.base = server,
	                                           .token_fn = read_token,
	                                           .token_ud = k,
	                                           .cafile = ca,
	                                           .user_agent = "cnlab",
	                                           .connect_timeout_ms = 5000,
	                                           .timeout_ms = k->timeout_ms},
	               &k->cl);
	*ret = k;
	return 0;
}

void cnl_kube_close(struct cnl_kube *k)
{
	if (!k)
		return;
	cnl_client_free(k->cl);
	free(k);
}

static bool retryable(int rc, long status)
{
	return rc == -EIO || status == 429 || status == 500 || status == 502 ||
	       status == 503 || status == 504;
}

static void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

long cnl_kube_call(struct cnl_kube *k, const char *method, const char *path,
                   json_t *body, const char *content_type, json_t **ret,
                   char *err, size_t errlen)
{
	long wait = k->backoff_ms;
	char *raw = NULL;
	struct cnl_client_reply r;
	int rc;

	if (ret)
		*ret = NULL;
	if (body && content_type && !(raw = json_dumps(body, JSON_COMPACT)))
		return -ENOMEM;
	for (int attempt = 0;; attempt++) {
		struct cnl_client_request rq = {.method = method,
		                                .path = path,
		                                .json = raw ? NULL : body,
		                                .body = raw,
		                                .body_len =
		                                    raw ? strlen(raw) : 0,
		                                .content_type = content_type};

		rc = cnl_client_request(k->cl, &rq, &r);
		if (attempt >= k->retries || !retryable(rc, r.status))
			break;
		cnl_client_reply_done(&r);
		/* Up to a quarter more, so that many nodes do not come back
		 * in step. */
		pause_ms(wait + rand() % (wait / 4 + 1));
		wait = wait * 2 > 5000 ? 5000 : wait * 2;
	}
	free(raw);
	if (rc < 0) {
		cnl_seterr(err, errlen, "%s %s: %s", method, path, r.error);
		cnl_client_reply_done(&r);
		return rc;
	}
	if (r.status >= 400) {
		/* The API's errors are a Status object with a message. */
		json_t *m = r.json ? json_object_get(r.json, "message") : NULL;
		cnl_seterr(err, errlen, "%s %s: %ld %s", method, path, r.status,
		           json_is_string(m) ? json_string_value(m) : "");
	}
	if (ret)
		*ret = json_incref(r.json);
	cnl_client_reply_done(&r);
	return r.status;
}
