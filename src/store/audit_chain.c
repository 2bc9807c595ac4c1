/*
 * audit_chain.c - the audit log's hash chain, the same for every backend
 * (invariant 5 of store.h): the canonical text of a record and its
 * SHA-256 linked to the record before.
 *
 * A record's hash is SHA-256 over its predecessor's hash (64 hex digits)
 * followed by the canonical text of the record:
 *
 *     cnlab-audit-v1\n seq=<seq>\n ts_ms=<ms>\n actor=<len>:<text>\n
 *     action=<len>:<text>\n target=<len>:<text>\n result=<len>:<text>\n
 *
 * (without the spaces).  Length prefixes make the text unambiguous whatever
 * the fields contain.  A chain written by one backend verifies in another:
 * nothing of the database takes part.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

#include "store/store-internal.h"

/* Appends to a buffer that cnl_store_audit_hash() sized for the longest record.
 */
struct canon {
	char *p;
	char *end;
};

static void put(struct canon *c, const char *s, size_t n)
{
	if (c->p && n <= (size_t)(c->end - c->p)) {
		memcpy(c->p, s, n);
		c->p += n;
	} else {
		c->p = NULL; /* does not fit: an error, never a cut text */
	}
}

static void put_num(struct canon *c, unsigned long long v)
{
	char d[24];
	size_t i = sizeof(d);

	do
		d[--i] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	put(c, d + i, sizeof(d) - i);
}

static void put_int(struct canon *c, long long v)
{
	if (v < 0)
		put(c, "-", 1);
	put_num(c,
	        v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
}

/* "<label>=<len>:<text>\n" */
static void put_text(struct canon *c, const char *label, const char *text)
{
	size_t n = strlen(text);

	put(c, label, strlen(label));
	put_num(c, n);
	put(c, ":", 1);
	put(c, text, n);
	put(c, "\n", 1);
}

/*
 * The hash of @a (its seq, ts_ms and four texts) chained to @prev_hash,
 * as 64 lowercase hex digits in @hex.  0, -ENOMEM or -EIO.  The text is
 * put together by hand: snprintf() of it and of each hex digit pair was
 * most of an append's CPU (the first cycle after a restart appends one
 * per pending job whose wait reason it has not recorded yet).
 */
/* SHA-256 fetched once: EVP_sha256() makes every digest look the
 * algorithm up in the providers again (OpenSSL 3), a submission's five
 * records five times. */
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256;

static void sha256_fetch(void)
{
	sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int cnl_store_audit_hash(const struct cnl_store_audit *a, const char *prev_hash,
                         char hex[CNL_STORE_SHA256_HEX])
{
	static const char digits[] = "0123456789abcdef";
	/* 64 + 4 texts of < CNL_STORE_AUDIT_MAX + labels and numbers. */
	char buf[64 + 4 * CNL_STORE_AUDIT_MAX + 256];
	struct canon c = {buf, buf + sizeof(buf)};
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	put(&c, prev_hash, strnlen(prev_hash, 64));
	put(&c, "cnlab-audit-v1\nseq=", 19);
	put_int(&c, a->seq);
	put(&c, "\nts_ms=", 7);
	put_int(&c, a->ts_ms);
	put(&c, "\n", 1);
	put_text(&c, "actor=", a->actor);
	put_text(&c, "action=", a->action);
	put_text(&c, "target=", a->target);
	put_text(&c, "result=", a->result);
	if (!c.p)
		return -EIO;
	pthread_once(&sha256_once, sha256_fetch);
	if (!sha256 ||
	    EVP_Digest(buf, (size_t)(c.p - buf), md, &mdlen, sha256, NULL) !=
	        1 ||
	    mdlen != 32)
		return -EIO;
	for (unsigned int i = 0; i < mdlen; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[2 * mdlen] = '\0';
	return 0;
}
