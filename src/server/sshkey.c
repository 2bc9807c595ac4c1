/*
 * sshkey.c - OpenSSH public keys checked, host keys made (sshkey.h).
 *
 * The wire format of a key blob (RFC 4253 6.6, RFC 5656 3.1, RFC 8709,
 * OpenSSH's PROTOCOL.u2f) is a run of strings, each a 32-bit big-endian
 * length and its bytes; an mpint is such a string holding a two's
 * complement number.  The private key format is OpenSSH's PROTOCOL.key.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/util.h"
#include "server/sshkey.h"

/* ---- reading a blob ------------------------------------------------ */

struct rd {
	const uint8_t *p;
	size_t n;
};

/* The next string of @r: its bytes in *@s, *@len; false at a short blob. */
static bool rd_str(struct rd *r, const uint8_t **s, size_t *len)
{
	uint32_t l;

	if (r->n < 4)
		return false;
	l = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 |
	    (uint32_t)r->p[2] << 8 | r->p[3];
	if (l > r->n - 4)
		return false;
	*s = r->p + 4;
	*len = l;
	r->p += 4 + l;
	r->n -= 4 + l;
	return true;
}

static bool rd_is(struct rd *r, const char *want)
{
	const uint8_t *s;
	size_t n;

	return rd_str(r, &s, &n) && n == strlen(want) &&
	       memcmp(s, want, n) == 0;
}

/* The bits of the positive mpint @s of @n bytes (0: not positive). */
static int mpint_bits(const uint8_t *s, size_t n)
{
	if (n == 0 || s[0] & 0x80)
		return 0;
	while (n > 0 && s[0] == 0) {
		s++;
		n--;
	}
	if (n == 0)
		return 0;
	int bits = (int)(n - 1) * 8;

	for (uint8_t top = s[0]; top; top >>= 1)
		bits++;
	return bits;
}

/* An EC point of curve @curve ("nistp256"...), uncompressed. */
static int ec_point(struct rd *r, const char *curve)
{
	static const struct {
		const char *name;
		size_t len;
		int bits;
	} curves[] = {{"nistp256", 65, 256},
	              {"nistp384", 97, 384},
	              {"nistp521", 133, 521}};
	const uint8_t *q;
	size_t n;

	for (size_t i = 0; i < CNL_ARRAY_SIZE(curves); i++)
		if (strcmp(curve, curves[i].name) == 0)
			return rd_is(r, curve) && rd_str(r, &q, &n) &&
			               n == curves[i].len && q[0] == 0x04
			           ? curves[i].bits
			           : 0;
	return 0;
}

/* The blob's size in bits when its content is a key of @type, else 0. */
static int blob_bits(const char *type, const uint8_t *blob, size_t n)
{
	struct rd r = {blob, n};
	const uint8_t *s;
	size_t len;
	int bits = 0;

	if (!rd_is(&r, type))
		return 0;
	if (strcmp(type, "ssh-ed25519") == 0) {
		bits = rd_str(&r, &s, &len) && len == 32 ? 256 : 0;
	} else if (strcmp(type, "sk-ssh-ed25519@openssh.com") == 0) {
		bits = rd_str(&r, &s, &len) && len == 32 &&
		               rd_str(&r, &s, &len) && len > 0
		           ? 256
		           : 0;
	} else if (strncmp(type, "ecdsa-sha2-", 11) == 0) {
		bits = ec_point(&r, type + 11);
	} else if (strcmp(type, "sk-ecdsa-sha2-nistp256@openssh.com") == 0) {
		bits =
		    ec_point(&r, "nistp256") && rd_str(&r, &s, &len) && len > 0
		        ? 256
		        : 0;
	} else if (strcmp(type, "ssh-rsa") == 0) {
		const uint8_t *e;
		size_t elen;

		if (rd_str(&r, &e, &elen) && mpint_bits(e, elen) > 1 &&
		    rd_str(&r, &s, &len))
			bits = mpint_bits(s, len);
	}
	/* Nothing after the key. */
	return r.n == 0 ? bits : 0;
}

/* ---- public keys --------------------------------------------------- */

static const char *const types[] = {
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
};

void cnl_sshkey_done(struct cnl_sshkey *k)
{
	if (!k)
		return;
	free(k->line);
	k->line = NULL;
}

int cnl_sshkey_parse(const char *text, struct cnl_sshkey *k, char *err,
                     size_t errlen)
{
	const char *p = text, *end, *b64, *b64_end, *cm, *cm_end;
	uint8_t blob[CNL_SSHKEY_LINE_MAX], md[SHA256_DIGEST_LENGTH];
	size_t tlen, known = 0;
	int n;
	char fp[64];

	memset(k, 0, sizeof(*k));
	if (strlen(text) > CNL_SSHKEY_LINE_MAX) {
		cnl_seterr(err, errlen, "longer than %d bytes",
		           CNL_SSHKEY_LINE_MAX);
		return -CNL_EPARSE;
	}
	while (*p == ' ' || *p == '\t')
		p++;
	end = p + strlen(p);
	if (end > p && end[-1] == '\n')
		end--;
	if (end > p && end[-1] == '\r')
		end--;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	for (const char *q = p; q < end; q++)
		if ((unsigned char)*q < 0x20 && *q != '\t') {
			cnl_seterr(err, errlen,
			           "one line of a public key (as in "
			           "~/.ssh/id_ed25519.pub), no control "
			           "characters or second line");
			return -CNL_EPARSE;
		}
	tlen = strcspn(p, " \t");
	if (p + tlen > end)
		tlen = (size_t)(end - p);
	for (size_t i = 0; i < CNL_ARRAY_SIZE(types); i++)
		if (tlen == strlen(types[i]) && memcmp(p, types[i], tlen) == 0)
			known = i + 1;
	if (!known) {
		if (tlen == 0 || memchr(p, '=', tlen) || memchr(p, ',', tlen))
			cnl_seterr(err, errlen,
			           "not a public key: it starts with options "
			           "or text, not a key type (options such as "
			           "command= are not taken)");
		else if (strncmp(p, "ssh-dss", tlen) == 0)
			cnl_seterr(err, errlen,
			           "DSA keys (ssh-dss) are not taken: make an "
			           "Ed25519 key with ssh-keygen -t ed25519");
		else
			cnl_seterr(
			    err, errlen,
			    "key type \"%.*s\" is not taken (ssh-ed25519, "
			    "ecdsa-sha2-nistp256/384/521, ssh-rsa, or a "
			    "security key's sk- type)",
			    (int)(tlen > 40 ? 40 : tlen), p);
		return -CNL_EPARSE;
	}
	snprintf(k->type, sizeof(k->type), "%s", types[known - 1]);
	b64 = p + tlen;
	while (b64 < end && (*b64 == ' ' || *b64 == '\t'))
		b64++;
	b64_end = b64 + strcspn(b64, " \t");
	if (b64_end > end)
		b64_end = end;
	if (b64 == b64_end || (n = cnl_b64_decode(b64, (size_t)(b64_end - b64),
	                                          CNL_B64_STD | CNL_B64_PAD,
	                                          blob, sizeof(blob))) <= 0) {
		cnl_seterr(err, errlen,
		           "the key after \"%s\" is not base64 (standard "
		           "alphabet, padded)",
		           k->type);
		return -CNL_EPARSE;
	}
	k->bits = blob_bits(k->type, blob, (size_t)n);
	if (k->bits == 0) {
		cnl_seterr(err, errlen,
		           "the base64 after \"%s\" is not a key of that type",
		           k->type);
		return -CNL_EPARSE;
	}
	if (strcmp(k->type, "ssh-rsa") == 0 && k->bits < 2048) {
		cnl_seterr(err, errlen,
		           "an RSA key of %d bits is too weak: 2048 or more "
		           "(or ssh-keygen -t ed25519)",
		           k->bits);
		return -CNL_EPARSE;
	}
	SHA256(blob, (size_t)n, md);
	cnl_b64_encode(md, sizeof(md), CNL_B64_STD, fp, sizeof(fp));
	memcpy(k->fingerprint, "SHA256:", 7);
	memcpy(k->fingerprint + 7, fp, 44); /* 43 digits and the NUL */
	cm = b64_end;
	while (cm < end && (*cm == ' ' || *cm == '\t'))
		cm++;
	cm_end = end;
	if ((size_t)(cm_end - cm) >= sizeof(k->comment)) {
		cnl_seterr(err, errlen, "its comment is longer than %zu bytes",
		           sizeof(k->comment) - 1);
		return -CNL_EPARSE;
	}
	snprintf(k->comment, sizeof(k->comment), "%.*s", (int)(cm_end - cm),
	         cm);
	for (char *q = k->comment; *q; q++)
		if (*q == '\t')
			*q = ' ';
	if (asprintf(&k->line, "%s %.*s%s%s", k->type, (int)(b64_end - b64),
	             b64, k->comment[0] ? " " : "", k->comment) < 0) {
		k->line = NULL;
		cnl_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* ---- host keys ----------------------------------------------------- */

struct wr {
	uint8_t *p;
	size_t n, cap;
};

static void wr_bytes(struct wr *w, const void *s, size_t n)
{
	if (w->n + n > w->cap) {
		w->cap = (w->n + n) * 2 + 64;
		w->p = cnl_xrealloc(w->p, w->cap);
	}
	memcpy(w->p + w->n, s, n);
	w->n += n;
}

static void wr_u32(struct wr *w, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16),
	                (uint8_t)(v >> 8), (uint8_t)v};

	wr_bytes(w, b, 4);
}

static void wr_str(struct wr *w, const void *s, size_t n)
{
	wr_u32(w, (uint32_t)n);
	wr_bytes(w, s, n);
}

static void wr_cstr(struct wr *w, const char *s)
{
	wr_str(w, s, strlen(s));
}

int cnl_sshkey_host_new(const char *comment, char **priv, char **pub)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	uint8_t pk[32], sk[64];
	size_t pkn = sizeof(pk), skn = 32;
	struct wr blob = {0}, sec = {0}, all = {0};
	uint32_t check;
	char *b64 = NULL, *bpub = NULL;
	int r = -EIO;

	*priv = *pub = NULL;
	if (!key || EVP_PKEY_get_raw_public_key(key, pk, &pkn) != 1 ||
	    pkn != 32 || EVP_PKEY_get_raw_private_key(key, sk, &skn) != 1 ||
	    skn != 32 || RAND_bytes((uint8_t *)&check, sizeof(check)) != 1)
		goto out;
	/* OpenSSH keeps the 32-byte seed and the public key together. */
	memcpy(sk + 32, pk, 32);
	wr_cstr(&blob, "ssh-ed25519");
	wr_str(&blob, pk, 32);
	wr_u32(&sec, check);
	wr_u32(&sec, check);
	wr_cstr(&sec, "ssh-ed25519");
	wr_str(&sec, pk, 32);
	wr_str(&sec, sk, 64);
	wr_cstr(&sec, comment ? comment : "");
	for (uint8_t pad = 1; sec.n % 8; pad++)
		wr_bytes(&sec, &pad, 1);
	wr_bytes(&all, "openssh-key-v1", 15); /* with its NUL */
	wr_cstr(&all, "none");
	wr_cstr(&all, "none");
	wr_cstr(&all, "");
	wr_u32(&all, 1);
	wr_str(&all, blob.p, blob.n);
	wr_str(&all, sec.p, sec.n);
	b64 = cnl_b64_encode_new(all.p, all.n, CNL_B64_STD | CNL_B64_PAD);
	bpub = cnl_b64_encode_new(blob.p, blob.n, CNL_B64_STD | CNL_B64_PAD);
	if (!b64 || !bpub)
		goto out;
	{
		size_t len = strlen(b64);
		struct wr t = {0};

		wr_bytes(&t, "-----BEGIN OPENSSH PRIVATE KEY-----\n", 36);
		for (size_t off = 0; off < len; off += 70) {
			wr_bytes(&t, b64 + off,
			         len - off > 70 ? 70 : len - off);
			wr_bytes(&t, "\n", 1);
		}
		wr_bytes(&t, "-----END OPENSSH PRIVATE KEY-----\n", 35);
		*priv = (char *)t.p; /* with the NUL of the last line */
	}
	if (asprintf(pub, "ssh-ed25519 %s", bpub) < 0) {
		*pub = NULL;
		explicit_bzero(*priv, strlen(*priv));
		free(*priv);
		*priv = NULL;
		goto out;
	}
	r = 0;
out:
	explicit_bzero(sk, sizeof(sk));
	if (sec.p)
		explicit_bzero(sec.p, sec.n);
	if (all.p)
		explicit_bzero(all.p, all.n);
	if (b64)
		explicit_bzero(b64, strlen(b64));
	free(blob.p);
	free(sec.p);
	free(all.p);
	free(b64);
	free(bpub);
	EVP_PKEY_free(key);
	return r;
}
