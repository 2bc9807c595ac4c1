/*
 * client.c - the agent's HTTP client (see client.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "agent/client.h"
#include "common/util.h"

#define REPLY_MAX (16 * 1024 * 1024)

struct cnl_client {
	CURL *c;
	char base[256];
	char auth[4096];
	char *cafile;
};

struct buf {
	char *p;
	size_t n;
	bool over;
};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct buf *b = ud;
	size_t add = size * n;

	if (b->n + add > REPLY_MAX) {
		b->over = true;
		return 0;
	}
	b->p = cnl_xrealloc(b->p, b->n + add + 1);
	memcpy(b->p + b->n, p, add);
	b->n += add;
	b->p[b->n] = '\0';
	return add;
}

int cnl_client_new(const char *base, const char *token, const char *cafile,
                   struct cnl_client **ret)
{
	struct cnl_client *cl;

	if (strlen(base) >= sizeof(cl->base) || strlen(token) > 4000)
		return -EINVAL;
	cl = cnl_xcalloc(1, sizeof(*cl));
	if (!(cl->c = curl_easy_init())) {
		free(cl);
		return -ENOMEM;
	}
	snprintf(cl->base, sizeof(cl->base), "%s", base);
	/* No trailing slash: paths start with one. */
	if (cl->base[0] && cl->base[strlen(cl->base) - 1] == '/')
		cl->base[strlen(cl->base) - 1] = '\0';
	snprintf(cl->auth, sizeof(cl->auth), "Authorization: Bearer %s", token);
	if (cafile)
		cl->cafile = cnl_xstrdup(cafile);
	*ret = cl;
	return 0;
}

void cnl_client_free(struct cnl_client *cl)
{
	if (!cl)
		return;
	curl_easy_cleanup(cl->c);
	explicit_bzero(cl->auth, sizeof(cl->auth));
	free(cl->cafile);
	free(cl);
}

long cnl_client_call(struct cnl_client *cl, const char *method,
                     const char *path, json_t *body, long timeout_s,
                     json_t **ret, char *err, size_t errlen)
{
	struct curl_slist *h = NULL;
	struct buf b = {0};
	char url[1024], *text = NULL;
	long status = 0;
	CURLcode rc;

	if (ret)
		*ret = NULL;
	snprintf(url, sizeof(url), "%s%s", cl->base, path);
	curl_easy_reset(cl->c);
	curl_easy_setopt(cl->c, CURLOPT_URL, url);
	curl_easy_setopt(cl->c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(cl->c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(cl->c, CURLOPT_TIMEOUT, timeout_s);
	curl_easy_setopt(cl->c, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_easy_setopt(cl->c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(cl->c, CURLOPT_WRITEDATA, &b);
	if (cl->cafile)
		curl_easy_setopt(cl->c, CURLOPT_CAINFO, cl->cafile);
	h = curl_slist_append(h, cl->auth);
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text) {
			curl_slist_free_all(h);
			snprintf(err, errlen, "cannot encode the request");
			return -ENOMEM;
		}
		curl_easy_setopt(cl->c, CURLOPT_POSTFIELDS, text);
		h = curl_slist_append(h, "Content-Type: application/json");
	} else if (strcmp(method, "GET") != 0) {
		curl_easy_setopt(cl->c, CURLOPT_POSTFIELDS, "");
	}
	curl_easy_setopt(cl->c, CURLOPT_HTTPHEADER, h);
	rc = curl_easy_perform(cl->c);
	curl_slist_free_all(h);
	free(text);
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "%s %s: %s", method, path,
		         b.over ? "reply too large" : curl_easy_strerror(rc));
		free(b.p);
		return -EIO;
	}
	curl_easy_getinfo(cl->c, CURLINFO_RESPONSE_CODE, &status);
	if (ret && b.p)
		*ret = json_loads(b.p, 0, NULL);
	if (status >= 400) {
		json_t *e = ret && *ret ? json_object_get(*ret, "error") : NULL;
		const char *m =
		    json_string_value(json_object_get(e, "message"));

		snprintf(err, errlen, "%s %s: %ld %s", method, path, status,
		         m ? m : "");
	}
	free(b.p);
	return status;
}
