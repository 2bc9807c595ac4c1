/*
 * auth.c - password hashing (scrypt), HS256 JSON Web Tokens and API tokens
 * for cnlabd; the API and its refusal rules are documented in auth.h.
 *
 * Design notes.
 *
 * 1. Everything that reaches a comparison of secrets goes through
 *    CRYPTO_memcmp, so the time taken does not reveal how many leading
 *    bytes of a guessed signature or key were right.
 * 2. Token verification has one answer for every refusal, -CNL_EAUTH, so a
 *    client learns nothing about which check failed; the order of the checks
 *    is: size and shape, header (alg), signature, then claims.  Claims are
 *    parsed only from a payload whose signature is valid.
 * 3. The algorithm is fixed by the verifier, never chosen by the token: the
 *    header must say "HS256" and nothing else, which closes both "alg":"none"
 *    and the RS256-with-a-public-key-as-HMAC-key confusion.
 * 4. base64url decoding is strict (canonical), so one token has exactly one
 *    spelling and a signature cannot be malleated by flipping unused bits.
 * 5. Results are built in locals and copied out only on success, which keeps
 *    output parameters untouched on failure.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/util.h"
#include "net/jwt.h"
#include "server/auth.h"

#define HS256_LEN     32
#define HS256_B64_LEN 43

/* Bounds on what a stored password hash may carry. */
#define SALT_MIN 8
#define SALT_MAX 64

static const char jwt_header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";

/* ------------------------------------------------------------------------ */
/* Passwords                                                                */
/* ------------------------------------------------------------------------ */

static int password_len_ok(const char *password, size_t *ret_len)
{
	size_t n = strnlen(password, CNL_AUTH_PASSWORD_MAX + 1);

	if (n < CNL_AUTH_PASSWORD_MIN || n > CNL_AUTH_PASSWORD_MAX)
		return -CNL_ESIZE;
	*ret_len = n;
	return 0;
}

/*
 * The memory scrypt needs for these parameters as OpenSSL counts it, or 0
 * when they are outside our ranges or would need more than MAXMEM.
 */
static uint64_t scrypt_mem(unsigned ln, unsigned r, unsigned p)
{
	uint64_t n;

	if (ln < CNL_AUTH_SCRYPT_LN_MIN || ln > CNL_AUTH_SCRYPT_LN_MAX)
		return 0;
	if (r < CNL_AUTH_SCRYPT_RP_MIN || r > CNL_AUTH_SCRYPT_RP_MAX)
		return 0;
	if (p < CNL_AUTH_SCRYPT_RP_MIN || p > CNL_AUTH_SCRYPT_RP_MAX)
		return 0;
	n = UINT64_C(1) << ln;
	if (128 * (uint64_t)r * n > CNL_AUTH_SCRYPT_MAXMEM)
		return 0;
	/* OpenSSL's own accounting: V of 128*r*(N+2) bytes plus B. */
	return 128 * (uint64_t)r * (n + 2) + 128 * (uint64_t)r * p;
}

static int scrypt_derive(const char *pw, size_t pwlen, const uint8_t *salt,
                         size_t saltlen, unsigned ln, unsigned r, unsigned p,
                         uint8_t *key, size_t keylen)
{
	uint64_t mem = scrypt_mem(ln, r, p);

	if (!mem)
		return -EINVAL;
	if (EVP_PBE_scrypt(pw, pwlen, salt, saltlen, UINT64_C(1) << ln, r, p,
	                   mem, key, keylen) != 1)
		return -EIO;
	return 0;
}

int cnl_auth_password_hash_cost(const char *password, int ln, char *out,
                                size_t outlen)
{
	uint8_t salt[CNL_AUTH_SALT_LEN], key[CNL_AUTH_KEY_LEN];
	char salt64[64], key64[64];
	size_t pwlen;
	int rc, n;

	if (!password || !out)
		return -EINVAL;
	if (ln < CNL_AUTH_SCRYPT_LN_MIN || ln > CNL_AUTH_SCRYPT_LN_MAX)
		return -EINVAL;
	rc = password_len_ok(password, &pwlen);
	if (rc < 0)
		return rc;
	if (RAND_bytes(salt, sizeof(salt)) != 1)
		return -EIO;
	rc = scrypt_derive(password, pwlen, salt, sizeof(salt), (unsigned)ln,
	                   CNL_AUTH_SCRYPT_R, CNL_AUTH_SCRYPT_P, key,
	                   sizeof(key));
	if (rc < 0)
		goto out;
	cnl_b64_encode(salt, sizeof(salt), CNL_B64_STD, salt64, sizeof(salt64));
	cnl_b64_encode(key, sizeof(key), CNL_B64_STD, key64, sizeof(key64));
	n = snprintf(out, outlen, "$scrypt$ln=%d,r=%d,p=%d$%s$%s", ln,
	             CNL_AUTH_SCRYPT_R, CNL_AUTH_SCRYPT_P, salt64, key64);
	rc = (n < 0 || (size_t)n >= outlen) ? -ENOBUFS : 0;
out:
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(key64, sizeof(key64));
	return rc;
}

int cnl_auth_password_decoy(int ln, char *out, size_t outlen)
{
	uint8_t salt[CNL_AUTH_SALT_LEN], key[CNL_AUTH_KEY_LEN];
	char salt64[64], key64[64];
	int n;

	if (!out)
		return -EINVAL;
	if (ln < CNL_AUTH_SCRYPT_LN_MIN || ln > CNL_AUTH_SCRYPT_LN_MAX)
		return -EINVAL;
	if (RAND_bytes(salt, sizeof(salt)) != 1 ||
	    RAND_bytes(key, sizeof(key)) != 1)
		return -EIO;
	cnl_b64_encode(salt, sizeof(salt), CNL_B64_STD, salt64, sizeof(salt64));
	cnl_b64_encode(key, sizeof(key), CNL_B64_STD, key64, sizeof(key64));
	n = snprintf(out, outlen, "$scrypt$ln=%d,r=%d,p=%d$%s$%s", ln,
	             CNL_AUTH_SCRYPT_R, CNL_AUTH_SCRYPT_P, salt64, key64);
	return (n < 0 || (size_t)n >= outlen) ? -ENOBUFS : 0;
}

int cnl_auth_password_hash(const char *password, char *out, size_t outlen)
{
	return cnl_auth_password_hash_cost(password, CNL_AUTH_SCRYPT_LN, out,
	                                   outlen);
}

/* Parse "<name>=<1 or 2 digits>" at *pp followed by @end; advance *pp. */
static int parse_param(const char **pp, const char *name, char end,
                       unsigned *ret_val)
{
	const char *p = *pp;
	size_t nl = strlen(name);
	unsigned v = 0;
	int digits = 0;

	if (strncmp(p, name, nl) != 0 || p[nl] != '=')
		return -CNL_EPARSE;
	p += nl + 1;
	while (*p >= '0' && *p <= '9' && digits < 3) {
		v = v * 10 + (unsigned)(*p - '0');
		p++;
		digits++;
	}
	if (digits < 1 || digits > 2 || *p != end)
		return -CNL_EPARSE;
	*pp = p + 1;
	*ret_val = v;
	return 0;
}

int cnl_auth_password_verify(const char *password, const char *stored)
{
	static const char prefix[] = "$scrypt$";
	uint8_t salt[SALT_MAX], key[CNL_AUTH_KEY_LEN],
	    want[CNL_AUTH_KEY_LEN + 3];
	unsigned ln, r, p;
	const char *s, *dollar;
	size_t pwlen, slen;
	int rc, nsalt, nkey;

	if (!password || !stored)
		return -EINVAL;
	rc = password_len_ok(password, &pwlen);
	if (rc < 0)
		return rc;
	slen = strnlen(stored, CNL_AUTH_HASH_MAX);
	if (slen >= CNL_AUTH_HASH_MAX)
		return -CNL_EPARSE;
	if (strncmp(stored, prefix, sizeof(prefix) - 1) != 0)
		return -CNL_EPARSE;
	s = stored + sizeof(prefix) - 1;
	if (parse_param(&s, "ln", ',', &ln) < 0 ||
	    parse_param(&s, "r", ',', &r) < 0 ||
	    parse_param(&s, "p", '$', &p) < 0)
		return -CNL_EPARSE;
	if (!scrypt_mem(ln, r, p))
		return -CNL_EPARSE;
	dollar = strchr(s, '$');
	if (!dollar)
		return -CNL_EPARSE;
	nsalt = cnl_b64_decode(s, (size_t)(dollar - s), CNL_B64_STD, salt,
	                       sizeof(salt));
	if (nsalt < SALT_MIN)
		return -CNL_EPARSE;
	s = dollar + 1;
	/*
	 * The key length is fixed: scrypt's output for a shorter length is a
	 * prefix of the longer one, so accepting any length would let a
	 * truncated string still verify.
	 */
	nkey = cnl_b64_decode(s, strlen(s), CNL_B64_STD, want, sizeof(want));
	if (nkey != CNL_AUTH_KEY_LEN)
		return -CNL_EPARSE;
	rc = scrypt_derive(password, pwlen, salt, (size_t)nsalt, ln, r, p, key,
	                   (size_t)nkey);
	if (rc == 0 && CRYPTO_memcmp(key, want, (size_t)nkey) != 0)
		rc = -CNL_EAUTH;
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(want, sizeof(want));
	return rc;
}

/* ------------------------------------------------------------------------ */
/* JWT                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * HMAC-SHA256 (RFC 2104) over SHA-256 fetched once.  OpenSSL 3's one-shot
 * HMAC() fetches the MAC and the digest by name on every call, each a
 * lookup under the library's global lock: a JWT is checked on every
 * request, and under 64 connections that lookup and its lock were a
 * tenth of a submission's authentication.  Checked against RFC 4231's
 * vectors and HMAC() in test_auth.
 */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* SHA-256 of @a (@alen) then @b (@blen) into @out with @ctx; 0 or -EIO. */
static int sha256_two(EVP_MD_CTX *ctx, const void *a, size_t alen,
                      const void *b, size_t blen, uint8_t out[HS256_LEN])
{
	unsigned int n = 0;

	if (EVP_DigestInit_ex2(ctx, sha256_md, NULL) != 1 ||
	    EVP_DigestUpdate(ctx, a, alen) != 1 ||
	    (blen && EVP_DigestUpdate(ctx, b, blen) != 1) ||
	    EVP_DigestFinal_ex(ctx, out, &n) != 1 || n != HS256_LEN)
		return -EIO;
	return 0;
}

static int hmac_sha256(const uint8_t *key, size_t keylen, const void *data,
                       size_t len, uint8_t mac[HS256_LEN])
{
	enum { BLOCK = 64 };
	uint8_t k[BLOCK] = {0}, pad[BLOCK], inner[HS256_LEN];
	EVP_MD_CTX *ctx;
	int rc = -EIO;

	if (!key || keylen == 0 || keylen > INT_MAX)
		return -EINVAL;
	pthread_once(&sha256_once, sha256_fetch);
	if (!sha256_md || !(ctx = EVP_MD_CTX_new()))
		return -EIO;
	/* A key longer than a block is its digest (RFC 2104, 2). */
	if (keylen > BLOCK) {
		if (sha256_two(ctx, key, keylen, NULL, 0, k) < 0)
			goto out;
	} else {
		memcpy(k, key, keylen);
	}
	for (size_t i = 0; i < BLOCK; i++)
		pad[i] = k[i] ^ 0x36;
	if (sha256_two(ctx, pad, BLOCK, data, len, inner) < 0)
		goto out;
	for (size_t i = 0; i < BLOCK; i++)
		pad[i] = k[i] ^ 0x5c;
	rc = sha256_two(ctx, pad, BLOCK, inner, sizeof(inner), mac);
out:
	EVP_MD_CTX_free(ctx);
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(pad, sizeof(pad));
	OPENSSL_cleanse(inner, sizeof(inner));
	return rc;
}

int cnl_auth_hs256(const uint8_t *key, size_t keylen, const char *input,
                   size_t inlen, char *out, size_t outlen)
{
	uint8_t mac[HS256_LEN];
	int rc;

	if (!input || !out)
		return -EINVAL;
	rc = hmac_sha256(key, keylen, input, inlen, mac);
	if (rc < 0)
		return rc;
	return cnl_b64_encode(mac, sizeof(mac), CNL_B64_URL, out, outlen);
}

static bool claim_terminated(const char *s)
{
	return memchr(s, '\0', CNL_AUTH_CLAIM_MAX) != NULL;
}

/* Add @v under @name, taking the reference; false on failure. */
static bool put(json_t *o, const char *name, json_t *v)
{
	return v && json_object_set_new(o, name, v) == 0;
}

/* The payload of @c as compact JSON, malloc'd; NULL on failure. */
static char *claims_json(const struct cnl_auth_claims *c)
{
	json_t *o = json_object();
	char *s = NULL;
	bool ok;

	if (!o)
		return NULL;
	ok = put(o, "sub", json_string(c->sub)) &&
	     put(o, "aud", json_string(c->aud)) &&
	     put(o, "exp", json_integer(c->exp));
	if (ok && c->iat)
		ok = put(o, "iat", json_integer(c->iat));
	if (ok && c->iss[0])
		ok = put(o, "iss", json_string(c->iss));
	if (ok && c->proj[0])
		ok = put(o, "proj", json_string(c->proj));
	if (ok && c->role[0])
		ok = put(o, "role", json_string(c->role));
	if (ok && c->jti[0])
		ok = put(o, "jti", json_string(c->jti));
	if (ok)
		s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(o);
	return s;
}

int cnl_auth_jwt_sign(const struct cnl_auth_claims *c, const uint8_t *key,
                      size_t keylen, char *out, size_t outlen)
{
	char *payload;
	size_t plen, hlen, total, pos;
	int rc;

	if (!c || !key || keylen == 0 || keylen > INT_MAX || !out)
		return -EINVAL;
	if (!claim_terminated(c->sub) || !claim_terminated(c->aud) ||
	    !claim_terminated(c->iss) || !claim_terminated(c->proj) ||
	    !claim_terminated(c->role) || !claim_terminated(c->jti))
		return -EINVAL;
	if (!c->sub[0] || !c->aud[0] || c->exp <= 0 || c->exp <= c->iat)
		return -EINVAL;
	payload = claims_json(c);
	if (!payload)
		return -EINVAL; /* strings that are not UTF-8, or no memory */
	plen = strlen(payload);
	hlen = (4 * (sizeof(jwt_header) - 1) + 2) / 3;
	total = hlen + 1 + (4 * plen + 2) / 3 + 1 + HS256_B64_LEN;
	if (total > CNL_AUTH_JWT_MAX) {
		rc = -CNL_ESIZE;
		goto out;
	}
	if (outlen < total + 1) {
		rc = -ENOBUFS;
		goto out;
	}
	pos = (size_t)cnl_b64_encode((const uint8_t *)jwt_header,
	                             sizeof(jwt_header) - 1, CNL_B64_URL, out,
	                             outlen);
	out[pos++] = '.';
	pos += (size_t)cnl_b64_encode((const uint8_t *)payload, plen,
	                              CNL_B64_URL, out + pos, outlen - pos);
	out[pos] = '.';
	rc = cnl_auth_hs256(key, keylen, out, pos, out + pos + 1,
	                    outlen - pos - 1);
	if (rc < 0)
		goto out;
	rc = (int)total;
out:
	free(payload);
	return rc;
}

static bool header_ok(const char *s, size_t len)
{
	json_t *h = cnl_jwt_part_json(s, len);
	json_t *alg, *typ;
	bool ok;

	if (!h)
		return false;
	alg = json_object_get(h, "alg");
	typ = json_object_get(h, "typ");
	ok =
	    json_is_string(alg) && strcmp(json_string_value(alg), "HS256") == 0;
	/* We understand no critical extension (RFC 7515 section 4.1.11). */
	if (json_object_get(h, "crit"))
		ok = false;
	if (typ && !json_is_string(typ))
		ok = false;
	json_decref(h);
	return ok;
}

/* The claims: net/jwt.h's checks with no leeway on "exp" (our own clock),
 * then the string claims CNLab puts in its tokens. */
static bool claims_ok(const char *s, size_t len, const char *audience,
                      int64_t now_s, struct cnl_auth_claims *c)
{
	json_t *o = cnl_jwt_part_json(s, len);
	struct cnl_jwt_times t = {0};
	bool ok;

	if (!o)
		return false;
	ok = cnl_jwt_check_claims(o,
	                          &(struct cnl_jwt_rules){
	                              .audience = audience,
	                              .now_s = now_s,
	                          },
	                          &t, NULL, 0) == 0 &&
	     cnl_jwt_claim_str(o, "sub", true, c->sub, sizeof(c->sub)) &&
	     cnl_jwt_claim_str(o, "iss", false, c->iss, sizeof(c->iss)) &&
	     cnl_jwt_claim_str(o, "proj", false, c->proj, sizeof(c->proj)) &&
	     cnl_jwt_claim_str(o, "role", false, c->role, sizeof(c->role)) &&
	     cnl_jwt_claim_str(o, "jti", false, c->jti, sizeof(c->jti));
	c->exp = t.exp;
	c->iat = t.iat;
	json_decref(o);
	return ok;
}

int cnl_auth_jwt_verify(const char *token, const uint8_t *key, size_t keylen,
                        const char *audience, int64_t now_s,
                        struct cnl_auth_claims *ret)
{
	struct cnl_auth_claims c;
	uint8_t mac[HS256_LEN], sig[HS256_LEN + 3];
	const char *d1, *d2, *end;
	size_t len, audlen;
	int n;

	if (!token || !key || keylen == 0 || keylen > INT_MAX || !audience ||
	    !ret)
		return -EINVAL;
	audlen = strnlen(audience, CNL_AUTH_CLAIM_MAX);
	if (audlen == 0 || audlen >= CNL_AUTH_CLAIM_MAX)
		return -EINVAL;
	len = cnl_strnlen(token, CNL_AUTH_JWT_MAX + 1);
	if (len > CNL_AUTH_JWT_MAX)
		return -CNL_EAUTH;
	end = token + len;
	d1 = memchr(token, '.', len);
	if (!d1)
		return -CNL_EAUTH;
	d2 = memchr(d1 + 1, '.', (size_t)(end - d1 - 1));
	if (!d2 || memchr(d2 + 1, '.', (size_t)(end - d2 - 1)))
		return -CNL_EAUTH;

	if (!header_ok(token, (size_t)(d1 - token)))
		return -CNL_EAUTH;

	n = cnl_b64_decode(d2 + 1, (size_t)(end - d2 - 1), CNL_B64_URL, sig,
	                   sizeof(sig));
	if (n != HS256_LEN)
		return -CNL_EAUTH;
	if (hmac_sha256(key, keylen, token, (size_t)(d2 - token), mac) < 0)
		return -EIO;
	if (CRYPTO_memcmp(mac, sig, HS256_LEN) != 0)
		return -CNL_EAUTH;

	memset(&c, 0, sizeof(c));
	if (!claims_ok(d1 + 1, (size_t)(d2 - d1 - 1), audience, now_s, &c))
		return -CNL_EAUTH;
	memcpy(c.aud, audience, audlen + 1);
	*ret = c;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* API tokens                                                               */
/* ------------------------------------------------------------------------ */

#define TOKEN_PREFIX_LEN (sizeof(CNL_AUTH_TOKEN_PREFIX) - 1)
#define TOKEN_RAND_LEN   32

int cnl_auth_token_new(char *out, size_t outlen)
{
	uint8_t raw[TOKEN_RAND_LEN];
	char buf[CNL_AUTH_TOKEN_MAX];

	if (!out)
		return -EINVAL;
	if (outlen < CNL_AUTH_TOKEN_MAX)
		return -ENOBUFS;
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -EIO;
	memcpy(buf, CNL_AUTH_TOKEN_PREFIX, TOKEN_PREFIX_LEN);
	cnl_b64_encode(raw, sizeof(raw), CNL_B64_URL, buf + TOKEN_PREFIX_LEN,
	               sizeof(buf) - TOKEN_PREFIX_LEN);
	memcpy(out, buf, sizeof(buf));
	OPENSSL_cleanse(raw, sizeof(raw));
	OPENSSL_cleanse(buf, sizeof(buf));
	return 0;
}

int cnl_auth_token_check(const char *token)
{
	uint8_t raw[TOKEN_RAND_LEN];
	size_t n;
	int rc;

	if (!token)
		return -CNL_EPARSE;
	n = strnlen(token, CNL_AUTH_TOKEN_MAX);
	if (n != CNL_AUTH_TOKEN_LEN ||
	    memcmp(token, CNL_AUTH_TOKEN_PREFIX, TOKEN_PREFIX_LEN) != 0)
		return -CNL_EPARSE;
	rc = cnl_b64_decode(token + TOKEN_PREFIX_LEN, n - TOKEN_PREFIX_LEN,
	                    CNL_B64_URL, raw, sizeof(raw));
	OPENSSL_cleanse(raw, sizeof(raw));
	return rc == TOKEN_RAND_LEN ? 0 : -CNL_EPARSE;
}

int cnl_auth_token_digest(const char *token, char out[CNL_AUTH_DIGEST_MAX])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t n;

	if (!token || !out)
		return -EINVAL;
	n = strnlen(token, CNL_AUTH_JWT_MAX + 1);
	if (n > CNL_AUTH_JWT_MAX)
		return -CNL_ESIZE;
	if (EVP_Digest(token, n, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != 32)
		return -EIO;
	for (unsigned int i = 0; i < mdlen; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[2 * mdlen] = '\0';
	return 0;
}

/* ---- collector tokens -----------------------------------------------------
 */

int cnl_auth_collect_token(const uint8_t *secret, size_t len, const char *job,
                           int64_t epoch, char out[CNL_AUTH_COLLECT_MAX])
{
	static const char what[] = "cnlab kube artifact collector";
	char key[48], msg[256];
	size_t pl = strlen(CNL_AUTH_COLLECT_PREFIX);
	int n, rc;

	out[0] = '\0';
	if (!secret || !len || !job || epoch < 0)
		return -EINVAL;
	n = snprintf(msg, sizeof(msg), "%s\n%" PRId64, job, epoch);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return -EINVAL;
	rc = cnl_auth_hs256(secret, len, what, sizeof(what) - 1, key,
	                    sizeof(key));
	if (rc < 0)
		return rc;
	memcpy(out, CNL_AUTH_COLLECT_PREFIX, pl);
	rc = cnl_auth_hs256((const uint8_t *)key, (size_t)rc, msg, (size_t)n,
	                    out + pl, CNL_AUTH_COLLECT_MAX - pl);
	explicit_bzero(key, sizeof(key));
	if (rc < 0) {
		out[0] = '\0';
		return rc;
	}
	return 0;
}

bool cnl_auth_collect_check(const uint8_t *secret, size_t len, const char *job,
                            int64_t epoch, const char *token)
{
	char want[CNL_AUTH_COLLECT_MAX];
	bool ok;

	if (!token || strlen(token) != CNL_AUTH_COLLECT_MAX - 1 ||
	    cnl_auth_collect_token(secret, len, job, epoch, want) < 0)
		return false;
	ok = CRYPTO_memcmp(want, token, CNL_AUTH_COLLECT_MAX - 1) == 0;
	explicit_bzero(want, sizeof(want));
	return ok;
}
