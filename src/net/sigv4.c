/*
 * sigv4.c - AWS Signature Version 4 (sigv4.h): canonical request, string
 * to sign, signing key and Authorization header, over mbedTLS's SHA-256
 * and HMAC.
 *
 * Input is checked before anything is hashed: a header value with CR or
 * LF would let a caller's data add a header to the request that is sent
 * (and sign it), so control characters are refused, not cleaned.  The
 * secret key is copied once, into the "AWS4" + secret HMAC key, which is
 * wiped after use.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>

#include "cnlab/errors.h"
#include "common/fs.h"
#include "common/util.h"
#include "net/sigv4.h"

#define ALGORITHM  "AWS4-HMAC-SHA256"
#define TERMINATOR "aws4_request"

/* A growing string: appended to, always NUL-terminated once used. */
struct sb {
	char *p;
	size_t len, cap;
};

static void sb_add(struct sb *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->p = cnl_xrealloc(b->p, cap);
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_adds(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_addc(struct sb *b, char c)
{
	sb_add(b, &c, 1);
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

static void escape_into(struct sb *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (unreserved(c)) {
			sb_addc(b, (char)c);
		} else {
			char e[3] = {'%', hex[c >> 4], hex[c & 15]};

			sb_add(b, e, 3);
		}
	}
}

char *cnl_sigv4_escape(const char *s)
{
	struct sb b = {0};

	sb_adds(&b, "");
	escape_into(&b, s, strlen(s));
	return b.p;
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char d[32];

	mbedtls_md(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), p, n, d);
	cnl_hex(d, sizeof(d), out);
}

static void hmac(const unsigned char *key, size_t keylen, const char *msg,
                 size_t n, unsigned char out[32])
{
	mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key,
	                keylen, (const unsigned char *)msg, n, out);
}

/* A credential field: non-empty, printable, within the limit, and but
 * for the secret key no "/" (it would move the scope's parts). */
static int cred_field(const char *name, const char *v, bool slash, char *err,
                      size_t errlen)
{
	size_t n;

	if (!v || !*v) {
		cnl_seterr(err, errlen, "%s: empty", name);
		return -EINVAL;
	}
	n = strlen(v);
	if (n > CNL_SIGV4_FIELD_MAX) {
		cnl_seterr(err, errlen, "%s: longer than %d bytes", name,
		           CNL_SIGV4_FIELD_MAX);
		return -CNL_ESIZE;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c <= ' ' || c == 0x7f || (c == '/' && !slash)) {
			cnl_seterr(err, errlen,
			           "%s: a space, control character%s at byte "
			           "%zu",
			           name, slash ? "" : " or \"/\"", i);
			return -EINVAL;
		}
	}
	return 0;
}

static bool valid_date8(const char *d)
{
	for (int i = 0; i < 8; i++)
		if (d[i] < '0' || d[i] > '9')
			return false;
	return true;
}

int cnl_sigv4_signing_key(const char *secret, const char *date,
                          const char *region, const char *service,
                          unsigned char ret_key[32])
{
	unsigned char k[32], *first;
	size_t n;

	if (!secret || !date || !region || !service || strlen(date) != 8 ||
	    !valid_date8(date) || strlen(secret) > CNL_SIGV4_FIELD_MAX)
		return -EINVAL;
	n = 4 + strlen(secret);
	first = cnl_xmalloc(n);
	memcpy(first, "AWS4", 4);
	memcpy(first + 4, secret, n - 4);
	hmac(first, n, date, 8, k);
	mbedtls_platform_zeroize(first, n);
	free(first);
	hmac(k, 32, region, strlen(region), k);
	hmac(k, 32, service, strlen(service), k);
	hmac(k, 32, TERMINATOR, strlen(TERMINATOR), ret_key);
	mbedtls_platform_zeroize(k, sizeof(k));
	return 0;
}

int cnl_sigv4_amz_date(int64_t unix_s, char ret[CNL_SIGV4_DATE_LEN])
{
	struct tm tm;
	time_t t = (time_t)unix_s;

	/* 253402300799: 9999-12-31T23:59:59Z. */
	if (unix_s < 0 || unix_s > INT64_C(253402300799) ||
	    !gmtime_r(&t, &tm) ||
	    strftime(ret, CNL_SIGV4_DATE_LEN, "%Y%m%dT%H%M%SZ", &tm) != 16)
		return -EINVAL;
	return 0;
}

/* YYYYMMDDTHHMMSSZ, digits where digits go. */
static bool valid_amz_date(const char *d)
{
	if (strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
		return false;
	for (int i = 0; i < 15; i++)
		if (i != 8 && (d[i] < '0' || d[i] > '9'))
			return false;
	return true;
}

/* The path with its dot and empty segments gone (RFC 3986 5.2.4 on a
 * path whose repeated slashes also collapse), each segment escaped. */
static void canonical_path(struct sb *b, const char *path)
{
	size_t n = strlen(path), nseg = 0, cap = n / 2 + 2;
	const char **seg = cnl_xmalloc(cap * sizeof(*seg));
	size_t *len = cnl_xmalloc(cap * sizeof(*len));
	bool dir = n == 0 || path[n - 1] == '/';
	const char *p = path;

	while (*p) {
		const char *s;
		size_t l;

		while (*p == '/')
			p++;
		s = p;
		while (*p && *p != '/')
			p++;
		l = (size_t)(p - s);
		if (l == 0)
			continue;
		dir = *p == '/';
		if (l == 1 && s[0] == '.') {
			dir = true;
			continue;
		}
		if (l == 2 && s[0] == '.' && s[1] == '.') {
			if (nseg)
				nseg--;
			dir = true;
			continue;
		}
		seg[nseg] = s;
		len[nseg++] = l;
	}
	sb_addc(b, '/');
	for (size_t i = 0; i < nseg; i++) {
		escape_into(b, seg[i], len[i]);
		if (i + 1 < nseg || dir)
			sb_addc(b, '/');
	}
	free(seg);
	free(len);
}

/* @s (@n bytes) percent-decoded, then escaped, into @b; -EINVAL for a
 * "%" not followed by two hex digits. */
static int reescape(struct sb *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '%') {
			int hi = i + 2 < n ? cnl_hex_digit(s[i + 1]) : -1;
			int lo = i + 2 < n ? cnl_hex_digit(s[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (char)(hi << 4 | lo);
			i += 2;
		}
		escape_into(b, &c, 1);
	}
	return 0;
}

struct pair {
	char *name, *value; /* escaped */
};

static int pair_cmp(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->value, y->value);
}

static int canonical_query(struct sb *b, const char *q, char *err,
                           size_t errlen)
{
	struct pair *v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;

	while (q && *q) {
		const char *amp = strchr(q, '&'),
		           *end = amp ? amp : q + strlen(q);
		const char *eq = memchr(q, '=', (size_t)(end - q));
		struct sb k = {0}, val = {0};

		if (end > q) {
			sb_adds(&k, "");
			sb_adds(&val, "");
			if (reescape(&k, q, (size_t)((eq ? eq : end) - q)) <
			        0 ||
			    (eq && reescape(&val, eq + 1,
			                    (size_t)(end - eq - 1)) < 0)) {
				cnl_seterr(
				    err, errlen,
				    "query: a \"%%\" not followed by two "
				    "hex digits");
				free(k.p);
				free(val.p);
				r = -EINVAL;
				break;
			}
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				v = cnl_xrealloc(v, cap * sizeof(*v));
			}
			v[n++] = (struct pair){k.p, val.p};
		}
		q = amp ? amp + 1 : end;
	}
	if (r == 0 && n) {
		qsort(v, n, sizeof(*v), pair_cmp);
		for (size_t i = 0; i < n; i++) {
			if (i)
				sb_addc(b, '&');
			sb_adds(b, v[i].name);
			sb_addc(b, '=');
			sb_adds(b, v[i].value);
		}
	}
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].value);
	}
	free(v);
	return r;
}

/* An HTTP token (RFC 9110 5.6.2). */
static bool token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c <= ' ' || c >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", c))
			return false;
	}
	return true;
}

struct hdr {
	char *name;  /* lower case */
	char *value; /* trimmed, spaces collapsed */
	size_t order;
};

static int hdr_cmp(const void *a, const void *b)
{
	const struct hdr *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* @v trimmed, each run of spaces and tabs one space. */
static char *clean_value(const char *v)
{
	struct sb b = {0};
	bool space = false;

	sb_adds(&b, "");
	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = true;
			continue;
		}
		if (space)
			sb_addc(&b, ' ');
		space = false;
		sb_addc(&b, *v);
	}
	return b.p;
}

static int check_request(const struct cnl_sigv4_request *req, char *err,
                         size_t errlen)
{
	if (!req->method || !token(req->method)) {
		cnl_seterr(err, errlen, "method: not an HTTP token");
		return -EINVAL;
	}
	if (!req->path || req->path[0] != '/') {
		cnl_seterr(err, errlen, "path: must start with \"/\"");
		return -EINVAL;
	}
	if (strlen(req->method) > CNL_SIGV4_FIELD_MAX ||
	    strlen(req->path) > CNL_SIGV4_FIELD_MAX ||
	    (req->query && strlen(req->query) > CNL_SIGV4_FIELD_MAX)) {
		cnl_seterr(err, errlen,
		           "method, path or query: longer than %d bytes",
		           CNL_SIGV4_FIELD_MAX);
		return -CNL_ESIZE;
	}
	for (const char *p = req->path; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f) {
			cnl_seterr(err, errlen, "path: a control character");
			return -EINVAL;
		}
	for (const char *p = req->query; p && *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '#') {
			cnl_seterr(err, errlen,
			           "query: a space, \"#\" or control character "
			           "(escape it: cnl_sigv4_escape())");
			return -EINVAL;
		}
	if (req->body_len > CNL_SIGV4_BODY_MAX) {
		cnl_seterr(err, errlen, "body: longer than %d bytes",
		           CNL_SIGV4_BODY_MAX);
		return -CNL_ESIZE;
	}
	if (req->body_len && !req->body) {
		cnl_seterr(err, errlen, "body: NULL with a length");
		return -EINVAL;
	}
	if (req->nheaders > CNL_SIGV4_HEADERS_MAX) {
		cnl_seterr(err, errlen, "headers: more than %d",
		           CNL_SIGV4_HEADERS_MAX);
		return -CNL_ESIZE;
	}
	for (size_t i = 0; i < req->nheaders; i++) {
		const struct cnl_sigv4_header *h = &req->headers[i];

		if (!h->name || !token(h->name) ||
		    strlen(h->name) > CNL_SIGV4_FIELD_MAX) {
			cnl_seterr(err, errlen,
			           "header %zu: its name is not an HTTP token",
			           i);
			return -EINVAL;
		}
		if (!h->value || strlen(h->value) > CNL_SIGV4_FIELD_MAX) {
			cnl_seterr(err, errlen,
			           "header %s: no value, or "
			           "longer than %d bytes",
			           h->name, CNL_SIGV4_FIELD_MAX);
			return -EINVAL;
		}
		for (const char *p = h->value; *p; p++)
			if (((unsigned char)*p < ' ' && *p != '\t') ||
			    *p == 0x7f) {
				cnl_seterr(err, errlen,
				           "header %s: a control character "
				           "(CR, LF, ...) in its value",
				           h->name);
				return -EINVAL;
			}
	}
	return 0;
}

/* Step 1, with the signed headers' names into @names and the date
 * (X-Amz-Date) into @date. */
static int canonical_request(const struct cnl_sigv4_request *req, struct sb *b,
                             struct sb *names, char date[CNL_SIGV4_DATE_LEN],
                             char *err, size_t errlen)
{
	struct hdr *h = cnl_xcalloc(req->nheaders + 1, sizeof(*h));
	char payload[65];
	bool host = false;
	int r;

	date[0] = '\0';
	sb_adds(b, req->method);
	sb_addc(b, '\n');
	canonical_path(b, req->path);
	sb_addc(b, '\n');
	if ((r = canonical_query(b, req->query, err, errlen)) < 0)
		goto out;
	sb_addc(b, '\n');
	for (size_t i = 0; i < req->nheaders; i++) {
		h[i].name = cnl_xstrdup(req->headers[i].name);
		for (char *p = h[i].name; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		h[i].value = clean_value(req->headers[i].value);
		h[i].order = i;
		if (strcmp(h[i].name, "host") == 0)
			host = true;
		if (strcmp(h[i].name, "x-amz-date") == 0) {
			if (!valid_amz_date(h[i].value) || date[0]) {
				cnl_seterr(err, errlen,
				           "X-Amz-Date: want one, of the form "
				           "YYYYMMDDTHHMMSSZ");
				r = -EINVAL;
				goto out;
			}
			snprintf(date, CNL_SIGV4_DATE_LEN, "%s", h[i].value);
		}
	}
	if (!host || !date[0]) {
		cnl_seterr(err, errlen, "%s: missing (it is signed)",
		           host ? "X-Amz-Date" : "Host");
		r = -EINVAL;
		goto out;
	}
	qsort(h, req->nheaders, sizeof(*h), hdr_cmp);
	for (size_t i = 0; i < req->nheaders; i++) {
		bool again = i > 0 && strcmp(h[i].name, h[i - 1].name) == 0;

		if (again) {
			sb_addc(b, ',');
		} else {
			if (i)
				sb_addc(b, '\n');
			sb_adds(b, h[i].name);
			sb_addc(b, ':');
			if (names->len)
				sb_addc(names, ';');
			sb_adds(names, h[i].name);
		}
		sb_adds(b, h[i].value);
	}
	sb_add(b, "\n\n", 2);
	sb_adds(b, names->p);
	sb_addc(b, '\n');
	sha256_hex(req->body ? req->body : "", req->body_len, payload);
	sb_adds(b, payload);
	r = 0;
out:
	for (size_t i = 0; i < req->nheaders; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
	return r;
}

void cnl_sigv4_done(struct cnl_sigv4 *s)
{
	if (!s)
		return;
	free(s->canonical);
	free(s->string_to_sign);
	free(s->signature);
	free(s->authorization);
	memset(s, 0, sizeof(*s));
}

int cnl_sigv4_sign(const struct cnl_sigv4_request *req,
                   const struct cnl_sigv4_credentials *cred,
                   struct cnl_sigv4 *ret, char *err, size_t errlen)
{
	struct sb creq = {0}, names = {0}, sts = {0}, authz = {0};
	char date[CNL_SIGV4_DATE_LEN], date8[9], hash[65], sig[65];
	unsigned char key[32], mac[32];
	int r;

	memset(ret, 0, sizeof(*ret));
	if ((r = cred_field("access key", cred->access_key, false, err,
	                    errlen)) < 0 ||
	    (r = cred_field("secret key", cred->secret_key, true, err,
	                    errlen)) < 0 ||
	    (r = cred_field("region", cred->region, false, err, errlen)) < 0 ||
	    (r = cred_field("service", cred->service, false, err, errlen)) <
	        0 ||
	    (r = check_request(req, err, errlen)) < 0)
		return r;
	sb_adds(&names, "");
	if ((r = canonical_request(req, &creq, &names, date, err, errlen)) <
	    0) {
		free(creq.p);
		free(names.p);
		return r;
	}
	memcpy(date8, date, 8);
	date8[8] = '\0';
	sha256_hex(creq.p, creq.len, hash);
	sb_adds(&sts, ALGORITHM "\n");
	sb_adds(&sts, date);
	sb_addc(&sts, '\n');
	sb_adds(&sts, date8);
	sb_addc(&sts, '/');
	sb_adds(&sts, cred->region);
	sb_addc(&sts, '/');
	sb_adds(&sts, cred->service);
	sb_adds(&sts, "/" TERMINATOR "\n");
	sb_adds(&sts, hash);
	cnl_sigv4_signing_key(cred->secret_key, date8, cred->region,
	                      cred->service, key);
	hmac(key, sizeof(key), sts.p, sts.len, mac);
	mbedtls_platform_zeroize(key, sizeof(key));
	cnl_hex(mac, sizeof(mac), sig);
	sb_adds(&authz, ALGORITHM " Credential=");
	sb_adds(&authz, cred->access_key);
	sb_addc(&authz, '/');
	sb_adds(&authz, date8);
	sb_addc(&authz, '/');
	sb_adds(&authz, cred->region);
	sb_addc(&authz, '/');
	sb_adds(&authz, cred->service);
	sb_adds(&authz, "/" TERMINATOR ", SignedHeaders=");
	sb_adds(&authz, names.p);
	sb_adds(&authz, ", Signature=");
	sb_adds(&authz, sig);
	free(names.p);
	ret->canonical = creq.p;
	ret->string_to_sign = sts.p;
	ret->signature = cnl_xstrdup(sig);
	ret->authorization = authz.p;
	return 0;
}
