/*
 * client.c - libcurl client of the cnlabd API (see client.h).
 */
#include "cli/client.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "common/util.h"

/* Responses larger than this are refused (artifacts are at most 512 KiB). */
#define BODY_MAX (64u << 20)

struct cnl_cli_client {
	CURL *curl;
	char *base;
	char *auth; /* "Authorization: Bearer ..." or NULL */
};

struct buf {
	char *p;
	size_t n;
	bool too_big;
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;

	if (b->n + n > BODY_MAX) {
		b->too_big = true;
		return 0;
	}
	b->p = cnl_xrealloc(b->p, b->n + n + 1);
	memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

struct cnl_cli_client *cnl_cli_client_new(const char *base, const char *token)
{
	struct cnl_cli_client *c = cnl_xcalloc(1, sizeof(*c));
	size_t n;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		return NULL;
	}
	c->base = cnl_xstrdup(base);
	n = strlen(c->base);
	while (n > 0 && c->base[n - 1] == '/')
		c->base[--n] = '\0';
	if (token && *token) {
		n = strlen(token) + 32;
		c->auth = cnl_xmalloc(n);
		snprintf(c->auth, n, "Authorization: Bearer %s", token);
	}
	return c;
}

void cnl_cli_client_free(struct cnl_cli_client *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c->base);
	free(c->auth);
	free(c);
	curl_global_cleanup();
}

void cnl_cli_reply_done(struct cnl_cli_reply *r)
{
	if (!r)
		return;
	free(r->body);
	json_decref(r->json);
	r->body = NULL;
	r->json = NULL;
}

char *cnl_cli_url_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = cnl_xmalloc(strlen(s) * 3 + 1), *o = out;

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
			*o++ = (char)ch;
		} else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = '\0';
	return out;
}

int cnl_cli_request(struct cnl_cli_client *c, const char *method,
                    const char *path, json_t *body, const char *idem,
                    struct cnl_cli_reply *ret)
{
	struct curl_slist *h = NULL;
	struct buf b = {0};
	_cleanup_free_ char *url = NULL, *text = NULL, *idem_h = NULL;
	size_t n = strlen(c->base) + strlen(path) + 1;
	CURLcode cc;
	CURL *e = c->curl;

	memset(ret, 0, sizeof(*ret));
	url = cnl_xmalloc(n);
	snprintf(url, n, "%s%s", c->base, path);
	curl_easy_reset(e);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "cnlab-cli/0.1");
	if (c->auth)
		h = curl_slist_append(h, c->auth);
	h = curl_slist_append(h, "Accept: application/json");
	if (idem) {
		n = strlen(idem) + 20;
		idem_h = cnl_xmalloc(n);
		snprintf(idem_h, n, "Idempotency-Key: %s", idem);
		h = curl_slist_append(h, idem_h);
	}
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		if (!text)
			return -ENOMEM;
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, text);
	} else if (strcmp(method, "GET") != 0) {
		/* POST actions with no body still send one ({}). */
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, "{}");
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	cc = curl_easy_perform(e);
	curl_slist_free_all(h);
	if (cc != CURLE_OK) {
		snprintf(ret->error, sizeof(ret->error), "%s",
		         b.too_big ? "response too large"
		                   : curl_easy_strerror(cc));
		free(b.p);
		return -EIO;
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &ret->status);
	ret->body = b.p ? b.p : cnl_xstrdup("");
	ret->len = b.n;
	if (ret->len && (ret->body[0] == '{' || ret->body[0] == '['))
		ret->json = json_loadb(ret->body, ret->len, 0, NULL);
	return 0;
}
