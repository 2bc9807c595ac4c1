/*
 * oidc.c - OpenID Connect ID token verification (RS256 against a JWKS) for
 * cnlabd; the API and its refusal rules are documented in oidc.h.
 *
 * Design notes.
 *
 * 1. The algorithm is fixed by the verifier: the header must say "RS256"
 *    and nothing else, and keys are only ever used as RSA public keys for
 *    RSASSA-PKCS1-v1_5 with SHA-256.  A token that says "HS256" is refused
 *    before any key is looked at, which closes the confusion where an
 *    attacker MACs a token with the (public) RSA key as the HMAC secret;
 *    "none" is refused the same way.  The rules are auth.c's HS256
 *    verifier's, and the parts and claims are judged by the same code
 *    (net/jwt.h): strict base64url, no duplicate JSON keys, no "crit",
 *    dates as JSON integers, checks in the order shape, header, signature,
 *    claims, and claims parsed only from a payload whose signature holds.
 *    The differences are the rules' arguments: "exp" gets
 *    CNL_AUTH_JWT_SKEW_S of leeway, because the tokens come from another
 *    machine's clock, "iat" is required and "iss" is checked.
 * 2. The key set is immutable once built.  The verifier holds a pointer to
 *    the current set under a read-write lock; verify takes the read lock
 *    just long enough to find its key and take a reference on the EVP_PKEY
 *    (EVP_PKEY_up_ref is atomic), then checks the signature with no lock
 *    held.  Reload builds a whole new set with no lock held and swaps the
 *    pointer under the write lock, so it is all or nothing, and a set is
 *    freed only after the swap; keys still in use survive through their
 *    references.
 * 3. Reloads (explicit, or caused by an unknown kid) are serialized by a
 *    mutex, which also guards the pacing of kid-driven refetches.  Threads
 *    that meet an unknown kid while a fetch is running wait for it and then
 *    look again, instead of fetching once each.  Pacing uses the caller's
 *    clock (@now_s), as the rest of the auth layer does, so tests decide
 *    what time it is.
 * 4. A JWKS is parsed whole before it is used: a malformed usable key
 *    fails the load with a message naming it, rather than being dropped
 *    silently; keys for other algorithms or uses are skipped, since
 *    providers publish those routinely.
 * 5. Fetches go through net/client.h's client, one per verifier, used
 *    only by cnl_oidc_new() and under reload_mu: no signals (we are in a
 *    threaded server), a total timeout, only http and https, no
 *    redirects, and a byte limit enforced as the reply arrives
 *    (Content-Length may be absent or lie).
 * 6. Results are built in locals and copied out only on success, so output
 *    parameters stay untouched on failure.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/util.h"
#include "net/client.h"
#include "net/jwt.h"
#include "server/auth.h"
#include "server/oidc.h"

/* An RSA signature is as long as the modulus. */
#define SIG_MAX (CNL_OIDC_RSA_BITS_MAX / 8)
/* Largest public exponent we take, bytes (65537 needs 3). */
#define EXP_MAX 8
/* Header part cnl_oidc_looks_like() decodes, in characters. */
#define LOOKS_MAX 1024

_Static_assert(CNL_OIDC_USERNAME_MAX == CNL_JWT_NAME_MAX,
               "an OIDC user name is a CNLab name (net/jwt.h)");

struct key {
	char kid[CNL_OIDC_SUB_MAX];
	EVP_PKEY *pkey;
};

/* An immutable set of verification keys (note 2). */
struct keyset {
	size_t n;
	struct key keys[];
};

struct cnl_oidc {
	char *issuer;
	char *audience;
	char *jwks_file;
	char *jwks_url;
	char *username_claim;
	struct cnl_client *jwks; /* fetches jwks_url; used under reload_mu */

	pthread_rwlock_t lock; /* guards @keys (the pointer) */
	struct keyset *keys;

	pthread_mutex_t reload_mu; /* serializes reloads; guards the pacing */
	bool refetched;            /* a kid-driven refetch has happened */
	int64_t last_refetch_s;    /* ... at this @now_s */
};

/* ------------------------------------------------------------------------ */
/* Key sets                                                                 */
/* ------------------------------------------------------------------------ */

static void keyset_free(struct keyset *ks)
{
	if (!ks)
		return;
	for (size_t i = 0; i < ks->n; i++)
		EVP_PKEY_free(ks->keys[i].pkey);
	free(ks);
}

/* Decode the base64url JWK member @name of @jwk into @buf (@cap bytes). */
static int jwk_bytes(json_t *jwk, const char *name, const char *what,
                     uint8_t *buf, size_t cap, char *err, size_t errlen)
{
	json_t *v = json_object_get(jwk, name);
	int n;

	if (!json_is_string(v)) {
		cnl_seterr(err, errlen, "%s: \"%s\" missing or not a string",
		           what, name);
		return -CNL_EPARSE;
	}
	n = cnl_b64_decode(json_string_value(v), json_string_length(v),
	                   CNL_B64_URL, buf, cap);
	if (n == -ENOBUFS || n == -CNL_ESIZE) {
		cnl_seterr(err, errlen, "%s: \"%s\" too long", what, name);
		return -CNL_EPARSE;
	}
	if (n < 0) {
		cnl_seterr(err, errlen, "%s: \"%s\" is not valid base64url",
		           what, name);
		return -CNL_EPARSE;
	}
	return n;
}

/* An RSA public key from big-endian modulus and exponent bytes. */
static int rsa_from_ne(const uint8_t *n, size_t nlen, const uint8_t *e,
                       size_t elen, EVP_PKEY **ret)
{
	OSSL_PARAM_BLD *bld = NULL;
	OSSL_PARAM *params = NULL;
	EVP_PKEY_CTX *ctx = NULL;
	EVP_PKEY *pkey = NULL;
	BIGNUM *bn = NULL, *be = NULL;
	int rc = -EIO;

	bn = BN_bin2bn(n, (int)nlen, NULL);
	be = BN_bin2bn(e, (int)elen, NULL);
	bld = OSSL_PARAM_BLD_new();
	if (!bn || !be || !bld)
		goto out;
	if (!OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) ||
	    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be))
		goto out;
	params = OSSL_PARAM_BLD_to_param(bld);
	ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
	if (!params || !ctx)
		goto out;
	if (EVP_PKEY_fromdata_init(ctx) != 1 ||
	    EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1)
		goto out;
	*ret = pkey;
	rc = 0;
out:
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	BN_free(bn);
	BN_free(be);
	ERR_clear_error();
	return rc;
}

/* An optional string member that, when present, must equal @want. */
static bool member_is(json_t *jwk, const char *name, const char *want)
{
	json_t *v = json_object_get(jwk, name);

	return !v ||
	       (json_is_string(v) && strcmp(json_string_value(v), want) == 0);
}

/*
 * Parse JWK @jwk (index @i).  Returns 1 and a key in @k when usable, 0 when
 * skipped (not an RS256 signing key), a negative code when malformed.
 */
static int parse_jwk(json_t *jwk, size_t i, struct key *k, char *err,
                     size_t errlen)
{
	uint8_t n[SIG_MAX + 1], e[EXP_MAX];
	json_t *kty, *kid;
	char what[CNL_OIDC_SUB_MAX + 32];
	const uint8_t *np = n, *ep = e;
	int nlen, elen, bits, rc;

	if (!json_is_object(jwk)) {
		cnl_seterr(err, errlen, "key %zu: not a JSON object", i);
		return -CNL_EPARSE;
	}
	kty = json_object_get(jwk, "kty");
	if (!json_is_string(kty)) {
		cnl_seterr(err, errlen,
		           "key %zu: \"kty\" missing or not a string", i);
		return -CNL_EPARSE;
	}
	if (strcmp(json_string_value(kty), "RSA") != 0 ||
	    !member_is(jwk, "use", "sig") || !member_is(jwk, "alg", "RS256"))
		return 0;

	kid = json_object_get(jwk, "kid");
	if (!json_is_string(kid) || json_string_length(kid) == 0) {
		cnl_seterr(err, errlen, "key %zu: RSA key without \"kid\"", i);
		return -CNL_EPARSE;
	}
	if (json_string_length(kid) >= sizeof(k->kid) ||
	    strlen(json_string_value(kid)) != json_string_length(kid)) {
		cnl_seterr(err, errlen, "key %zu: \"kid\" too long or not text",
		           i);
		return -CNL_EPARSE;
	}
	snprintf(what, sizeof(what), "key \"%s\"", json_string_value(kid));

	nlen = jwk_bytes(jwk, "n", what, n, sizeof(n), err, errlen);
	if (nlen < 0)
		return nlen;
	elen = jwk_bytes(jwk, "e", what, e, sizeof(e), err, errlen);
	if (elen < 0)
		return elen;
	/* RFC 7518 forbids leading zero octets, but some providers add one. */
	while (nlen > 0 && *np == 0) {
		np++;
		nlen--;
	}
	while (elen > 0 && *ep == 0) {
		ep++;
		elen--;
	}
	bits = nlen * 8;
	for (uint8_t top = nlen > 0 ? np[0] : 0; top < 0x80 && bits > 0;
	     top = (uint8_t)(top << 1))
		bits--;
	if (bits < CNL_OIDC_RSA_BITS_MIN || bits > CNL_OIDC_RSA_BITS_MAX) {
		cnl_seterr(err, errlen,
		           "%s: modulus of %d bits; RS256 needs %d..%d", what,
		           bits, CNL_OIDC_RSA_BITS_MIN, CNL_OIDC_RSA_BITS_MAX);
		return -CNL_EPARSE;
	}
	if (elen == 0 || (ep[elen - 1] & 1) == 0 || (elen == 1 && ep[0] < 3)) {
		cnl_seterr(err, errlen, "%s: \"e\" is not an odd exponent >= 3",
		           what);
		return -CNL_EPARSE;
	}
	rc = rsa_from_ne(np, (size_t)nlen, ep, (size_t)elen, &k->pkey);
	if (rc < 0) {
		cnl_seterr(err, errlen, "%s: libcrypto refused the key", what);
		return rc;
	}
	memcpy(k->kid, json_string_value(kid), json_string_length(kid) + 1);
	return 1;
}

/* Build a key set from JWKS text; @src names the source in messages. */
static int keyset_parse(const char *text, size_t len, const char *src,
                        struct keyset **ret, char *err, size_t errlen)
{
	char why[256];
	json_error_t jerr;
	json_t *root, *keys, *jwk;
	struct keyset *ks = NULL;
	size_t i, total;
	int rc;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		cnl_seterr(err, errlen, "%s: not JSON: line %d column %d: %s",
		           src, jerr.line, jerr.column, jerr.text);
		return -CNL_EPARSE;
	}
	keys = json_object_get(root, "keys");
	if (!json_is_object(root) || !json_is_array(keys)) {
		cnl_seterr(err, errlen, "%s: not a JWKS (no \"keys\" array)",
		           src);
		rc = -CNL_EPARSE;
		goto out;
	}
	total = json_array_size(keys);
	if (total > CNL_OIDC_KEYS_MAX) {
		cnl_seterr(err, errlen,
		           "%s: %zu keys, more than the %d allowed", src, total,
		           CNL_OIDC_KEYS_MAX);
		rc = -CNL_EPARSE;
		goto out;
	}
	ks = calloc(1, sizeof(*ks) + total * sizeof(ks->keys[0]));
	if (!ks) {
		cnl_seterr(err, errlen, "%s: out of memory", src);
		rc = -ENOMEM;
		goto out;
	}
	json_array_foreach (keys, i, jwk) {
		struct key *k = &ks->keys[ks->n];

		why[0] = '\0';
		rc = parse_jwk(jwk, i, k, why, sizeof(why));
		if (rc < 0) {
			cnl_seterr(err, errlen, "%s: %s", src, why);
			goto out;
		}
		if (rc == 0)
			continue;
		for (size_t j = 0; j < ks->n; j++) {
			if (strcmp(ks->keys[j].kid, k->kid) == 0) {
				cnl_seterr(err, errlen,
				           "%s: key \"%s\" listed twice", src,
				           k->kid);
				EVP_PKEY_free(k->pkey);
				k->pkey = NULL;
				rc = -CNL_EPARSE;
				goto out;
			}
		}
		ks->n++;
	}
	if (ks->n == 0) {
		cnl_seterr(err, errlen,
		           "%s: no RS256 keys (%zu keys, none RSA for signing)",
		           src, total);
		rc = -CNL_EPARSE;
		goto out;
	}
	*ret = ks;
	ks = NULL;
	rc = 0;
out:
	keyset_free(ks);
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading a JWKS                                                           */
/* ------------------------------------------------------------------------ */

struct buf {
	char *data;
	size_t len;
};

static int read_file(const char *path, struct buf *b, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	size_t n;
	int rc = 0;

	if (!f) {
		rc = -errno;
		cnl_seterr(err, errlen, "jwks_file %s: %s", path,
		           strerror(errno));
		return rc;
	}
	b->data = malloc(CNL_OIDC_JWKS_MAX + 1);
	if (!b->data) {
		fclose(f);
		cnl_seterr(err, errlen, "jwks_file %s: out of memory", path);
		return -ENOMEM;
	}
	n = fread(b->data, 1, CNL_OIDC_JWKS_MAX + 1, f);
	if (ferror(f)) {
		rc = -EIO;
		cnl_seterr(err, errlen, "jwks_file %s: read error", path);
	} else if (n > CNL_OIDC_JWKS_MAX) {
		rc = -CNL_ESIZE;
		cnl_seterr(err, errlen, "jwks_file %s: larger than %d KiB",
		           path, CNL_OIDC_JWKS_MAX / 1024);
	}
	fclose(f);
	b->len = n;
	return rc;
}

/* GET the JWKS URL of @o into @b (note 5). */
static int fetch_url(const struct cnl_oidc *o, struct buf *b, char *err,
                     size_t errlen)
{
	const char *url = o->jwks_url;
	struct cnl_client_reply r;
	int rc = -EIO;

	if (cnl_client_request(
	        o->jwks,
	        &(struct cnl_client_request){.method = "GET", .path = url},
	        &r) < 0) {
		if (r.too_large) {
			cnl_seterr(err, errlen,
			           "jwks_url %s: larger than %d KiB", url,
			           CNL_OIDC_JWKS_MAX / 1024);
			rc = -CNL_ESIZE;
		} else {
			cnl_seterr(err, errlen, "jwks_url %s: %s", url,
			           r.detail[0] ? r.detail : r.error);
		}
		goto out;
	}
	if (r.status != 200) {
		cnl_seterr(err, errlen, "jwks_url %s: HTTP status %ld", url,
		           r.status);
		goto out;
	}
	b->data = TAKE_PTR(r.body);
	b->len = r.len;
	rc = 0;
out:
	cnl_client_reply_done(&r);
	return rc;
}

/* Read or fetch the JWKS of @o and build a key set from it. */
static int load_keys(const struct cnl_oidc *o, struct keyset **ret, char *err,
                     size_t errlen)
{
	struct buf b = {0};
	char src[64 + 1024];
	int rc;

	if (o->jwks_file) {
		rc = read_file(o->jwks_file, &b, err, errlen);
		snprintf(src, sizeof(src), "jwks_file %s", o->jwks_file);
	} else {
		rc = fetch_url(o, &b, err, errlen);
		snprintf(src, sizeof(src), "jwks_url %s", o->jwks_url);
	}
	if (rc == 0)
		rc = keyset_parse(b.data, b.len, src, ret, err, errlen);
	free(b.data);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                */
/* ------------------------------------------------------------------------ */

static bool nonempty(const char *s)
{
	return s && s[0];
}

static int check_config(const struct cnl_oidc_config *cfg, char *err,
                        size_t errlen)
{
	if (!nonempty(cfg->issuer)) {
		cnl_seterr(err, errlen, "oidc: issuer is required");
		return -CNL_ECONFIG;
	}
	if (strlen(cfg->issuer) >= CNL_OIDC_ISS_MAX) {
		cnl_seterr(err, errlen, "oidc: issuer longer than %d bytes",
		           CNL_OIDC_ISS_MAX - 1);
		return -CNL_ECONFIG;
	}
	if (!nonempty(cfg->audience)) {
		cnl_seterr(err, errlen, "oidc: audience is required");
		return -CNL_ECONFIG;
	}
	if (nonempty(cfg->jwks_file) == nonempty(cfg->jwks_url)) {
		cnl_seterr(err, errlen,
		           "oidc: exactly one of jwks_file and jwks_url is "
		           "required");
		return -CNL_ECONFIG;
	}
	if (nonempty(cfg->jwks_url) &&
	    strncmp(cfg->jwks_url, "https://", 8) != 0 &&
	    strncmp(cfg->jwks_url, "http://", 7) != 0) {
		cnl_seterr(err, errlen,
		           "oidc: jwks_url %s: only http:// and https:// URLs",
		           cfg->jwks_url);
		return -CNL_ECONFIG;
	}
	if (cfg->username_claim && !cfg->username_claim[0]) {
		cnl_seterr(err, errlen, "oidc: username_claim is empty");
		return -CNL_ECONFIG;
	}
	return 0;
}

static char *dup_or_null(const char *s, bool *ok)
{
	char *d;

	if (!nonempty(s))
		return NULL;
	d = strdup(s);
	if (!d)
		*ok = false;
	return d;
}

int cnl_oidc_new(const struct cnl_oidc_config *cfg, struct cnl_oidc **ret,
                 char *err, size_t errlen)
{
	struct cnl_oidc *o;
	bool ok = true;
	int rc;

	if (!cfg || !ret) {
		cnl_seterr(err, errlen, "oidc: NULL argument");
		return -EINVAL;
	}
	rc = check_config(cfg, err, errlen);
	if (rc < 0)
		return rc;
	o = calloc(1, sizeof(*o));
	if (!o) {
		cnl_seterr(err, errlen, "oidc: out of memory");
		return -ENOMEM;
	}
	o->issuer = dup_or_null(cfg->issuer, &ok);
	o->audience = dup_or_null(cfg->audience, &ok);
	o->jwks_file = dup_or_null(cfg->jwks_file, &ok);
	o->jwks_url = dup_or_null(cfg->jwks_url, &ok);
	o->username_claim = dup_or_null(
	    cfg->username_claim ? cfg->username_claim : CNL_OIDC_USERNAME_CLAIM,
	    &ok);
	if (!ok)
		goto oom_free;
	if (o->jwks_url) {
		rc = cnl_client_new(
		    &(struct cnl_client_config){
		        .base = "", /* the URL is the whole path */
		        .timeout_ms = CNL_OIDC_FETCH_TIMEOUT_MS,
		        .reply_max = CNL_OIDC_JWKS_MAX,
		    },
		    &o->jwks);
		if (rc < 0) {
			cnl_seterr(err, errlen, "oidc: cannot start libcurl");
			goto fail_free;
		}
	}
	if (pthread_rwlock_init(&o->lock, NULL) != 0)
		goto oom_free;
	if (pthread_mutex_init(&o->reload_mu, NULL) != 0) {
		pthread_rwlock_destroy(&o->lock);
		goto oom_free;
	}
	rc = load_keys(o, &o->keys, err, errlen);
	if (rc < 0) {
		pthread_mutex_destroy(&o->reload_mu);
		pthread_rwlock_destroy(&o->lock);
		goto fail_free;
	}
	*ret = o;
	return 0;

oom_free:
	rc = -ENOMEM;
	cnl_seterr(err, errlen, "oidc: out of memory");
fail_free:
	cnl_client_free(o->jwks);
	free(o->issuer);
	free(o->audience);
	free(o->jwks_file);
	free(o->jwks_url);
	free(o->username_claim);
	free(o);
	return rc;
}

void cnl_oidc_free(struct cnl_oidc *o)
{
	if (!o)
		return;
	keyset_free(o->keys);
	pthread_mutex_destroy(&o->reload_mu);
	pthread_rwlock_destroy(&o->lock);
	cnl_client_free(o->jwks);
	free(o->issuer);
	free(o->audience);
	free(o->jwks_file);
	free(o->jwks_url);
	free(o->username_claim);
	free(o);
}

/* Load and swap in a new key set; the caller holds reload_mu. */
static int reload_locked(struct cnl_oidc *o, char *err, size_t errlen)
{
	struct keyset *ks = NULL, *old;
	int rc;

	rc = load_keys(o, &ks, err, errlen);
	if (rc < 0)
		return rc;
	pthread_rwlock_wrlock(&o->lock);
	old = o->keys;
	o->keys = ks;
	pthread_rwlock_unlock(&o->lock);
	keyset_free(old);
	return 0;
}

int cnl_oidc_reload(struct cnl_oidc *o, char *err, size_t errlen)
{
	int rc;

	if (!o) {
		cnl_seterr(err, errlen, "oidc: NULL argument");
		return -EINVAL;
	}
	pthread_mutex_lock(&o->reload_mu);
	rc = reload_locked(o, err, errlen);
	pthread_mutex_unlock(&o->reload_mu);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Verification                                                             */
/* ------------------------------------------------------------------------ */

/*
 * The key for @kid (NULL: the token has none) with a reference taken, or
 * NULL; *@several says whether a kid-less token met a set of several keys.
 */
static EVP_PKEY *find_key(struct cnl_oidc *o, const char *kid, bool *several)
{
	EVP_PKEY *pkey = NULL;
	struct keyset *ks;

	pthread_rwlock_rdlock(&o->lock);
	ks = o->keys;
	*several = false;
	if (!kid) {
		if (ks->n == 1)
			pkey = ks->keys[0].pkey;
		else
			*several = true;
	} else {
		for (size_t i = 0; i < ks->n; i++) {
			if (strcmp(ks->keys[i].kid, kid) == 0) {
				pkey = ks->keys[i].pkey;
				break;
			}
		}
	}
	if (pkey && EVP_PKEY_up_ref(pkey) != 1)
		pkey = NULL;
	pthread_rwlock_unlock(&o->lock);
	return pkey;
}

/*
 * The unknown-kid path: fetch the JWKS again unless one such fetch
 * happened less than CNL_OIDC_REFETCH_S ago, then look again (note 3).
 */
static EVP_PKEY *refetch_and_find(struct cnl_oidc *o, const char *kid,
                                  int64_t now_s, char *why, size_t whylen)
{
	bool several;

	pthread_mutex_lock(&o->reload_mu);
	if (!o->refetched || now_s < o->last_refetch_s ||
	    (uint64_t)now_s - (uint64_t)o->last_refetch_s >=
	        CNL_OIDC_REFETCH_S) {
		o->refetched = true;
		o->last_refetch_s = now_s;
		/* A failed fetch keeps the old keys; the token then fails. */
		if (reload_locked(o, why, whylen) == 0)
			snprintf(why, whylen, "after fetching the JWKS again");
	}
	pthread_mutex_unlock(&o->reload_mu);
	return find_key(o, kid, &several);
}

/* Check the header; on success *@ret_kid is the kid (or NULL if absent). */
static int check_header(json_t *h, const char **ret_kid, char *err,
                        size_t errlen)
{
	json_t *alg = json_object_get(h, "alg");
	json_t *kid = json_object_get(h, "kid");
	json_t *typ = json_object_get(h, "typ");

	if (!json_is_string(alg)) {
		cnl_seterr(err, errlen, "token header has no \"alg\"");
		return -CNL_EAUTH;
	}
	if (strcmp(json_string_value(alg), "RS256") != 0) {
		cnl_seterr(err, errlen, "token alg \"%.32s\" is not RS256",
		           json_string_value(alg));
		return -CNL_EAUTH;
	}
	/* We understand no critical extension (RFC 7515 section 4.1.11). */
	if (json_object_get(h, "crit")) {
		cnl_seterr(err, errlen, "token header has \"crit\"");
		return -CNL_EAUTH;
	}
	if (typ && !json_is_string(typ)) {
		cnl_seterr(err, errlen, "token \"typ\" is not a string");
		return -CNL_EAUTH;
	}
	if (kid && (!json_is_string(kid) || json_string_length(kid) == 0 ||
	            json_string_length(kid) >= CNL_OIDC_SUB_MAX)) {
		cnl_seterr(err, errlen, "token \"kid\" is not a short string");
		return -CNL_EAUTH;
	}
	*ret_kid = kid ? json_string_value(kid) : NULL;
	return 0;
}

static int check_signature(EVP_PKEY *pkey, const char *input, size_t inlen,
                           const uint8_t *sig, size_t siglen, char *err,
                           size_t errlen)
{
	EVP_PKEY_CTX *pctx = NULL;
	EVP_MD_CTX *md;
	int rc = -EIO, v;

	if (siglen != (size_t)EVP_PKEY_get_size(pkey)) {
		cnl_seterr(err, errlen,
		           "token signature is %zu bytes, the key's is %d",
		           siglen, EVP_PKEY_get_size(pkey));
		return -CNL_EAUTH;
	}
	md = EVP_MD_CTX_new();
	if (!md) {
		cnl_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (EVP_DigestVerifyInit_ex(md, &pctx, "SHA256", NULL, NULL, pkey,
	                            NULL) != 1 ||
	    EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) != 1) {
		cnl_seterr(err, errlen, "libcrypto: cannot set up RS256");
		goto out;
	}
	v = EVP_DigestVerify(md, sig, siglen, (const uint8_t *)input, inlen);
	if (v == 1) {
		rc = 0;
	} else {
		cnl_seterr(err, errlen, "token signature does not verify");
		rc = -CNL_EAUTH;
	}
out:
	EVP_MD_CTX_free(md);
	ERR_clear_error();
	return rc;
}

static int check_claims(const struct cnl_oidc *o, json_t *p, int64_t now_s,
                        struct cnl_oidc_identity *id, char *err, size_t errlen)
{
	struct cnl_jwt_times t;
	int rc;

	/* Another machine's clock: "exp" gets the skew too (note 1). */
	rc = cnl_jwt_check_claims(p,
	                          &(struct cnl_jwt_rules){
	                              .audience = o->audience,
	                              .issuer = o->issuer,
	                              .now_s = now_s,
	                              .exp_leeway_s = CNL_AUTH_JWT_SKEW_S,
	                              .iat_required = true,
	                          },
	                          &t, err, errlen);
	if (rc < 0)
		return rc;
	id->exp = t.exp;
	if (!cnl_jwt_claim_str(p, "sub", true, id->sub, sizeof(id->sub))) {
		cnl_seterr(err, errlen,
		           "token \"sub\" missing, empty or too long");
		return -CNL_EAUTH;
	}
	if (!cnl_jwt_claim_str(p, "email", false, id->email,
	                       sizeof(id->email))) {
		cnl_seterr(err, errlen,
		           "token \"email\" not a string or too long");
		return -CNL_EAUTH;
	}
	/* The name is a hint for a new user's name only: the identity is
	 * (iss, sub).  One that is absent or not a valid CNLab name is
	 * left empty rather than refused. */
	if (cnl_jwt_claim_name(p, o->username_claim, id->username, NULL, 0) < 0)
		id->username[0] = '\0';
	snprintf(id->iss, sizeof(id->iss), "%s", o->issuer);
	return 0;
}

int cnl_oidc_verify(struct cnl_oidc *o, const char *id_token, int64_t now_s,
                    struct cnl_oidc_identity *ret, char *err, size_t errlen)
{
	struct cnl_oidc_identity id;
	uint8_t sig[SIG_MAX + 3];
	const char *d1, *d2, *end, *kid = NULL;
	json_t *header = NULL, *payload = NULL;
	EVP_PKEY *pkey = NULL;
	char why[256] = "";
	bool several = false;
	size_t len;
	int rc, n;

	if (!o || !id_token || !ret) {
		cnl_seterr(err, errlen, "oidc: NULL argument");
		return -EINVAL;
	}
	len = strnlen(id_token, CNL_AUTH_JWT_MAX + 1);
	if (len > CNL_AUTH_JWT_MAX) {
		cnl_seterr(err, errlen, "token longer than %d characters",
		           CNL_AUTH_JWT_MAX);
		return -CNL_EAUTH;
	}
	end = id_token + len;
	d1 = memchr(id_token, '.', len);
	d2 = d1 ? memchr(d1 + 1, '.', (size_t)(end - d1 - 1)) : NULL;
	if (!d2 || memchr(d2 + 1, '.', (size_t)(end - d2 - 1))) {
		cnl_seterr(err, errlen,
		           "token is not three '.'-separated parts");
		return -CNL_EAUTH;
	}
	header = cnl_jwt_part_json(id_token, (size_t)(d1 - id_token));
	if (!header) {
		cnl_seterr(err, errlen,
		           "token header is not base64url of a JSON object");
		return -CNL_EAUTH;
	}
	rc = check_header(header, &kid, err, errlen);
	if (rc < 0)
		goto out;

	n = cnl_b64_decode(d2 + 1, (size_t)(end - d2 - 1), CNL_B64_URL, sig,
	                   sizeof(sig));
	if (n <= 0) {
		cnl_seterr(err, errlen,
		           "token signature is not base64url or too long");
		rc = -CNL_EAUTH;
		goto out;
	}

	pkey = find_key(o, kid, &several);
	if (!pkey && kid && o->jwks_url)
		pkey = refetch_and_find(o, kid, now_s, why, sizeof(why));
	if (!pkey) {
		if (several)
			cnl_seterr(
			    err, errlen,
			    "token has no \"kid\" and the JWKS has several "
			    "keys");
		else
			cnl_seterr(err, errlen,
			           "token kid \"%.64s\" unknown%s%s%s",
			           kid ? kid : "", why[0] ? " (" : "", why,
			           why[0] ? ")" : "");
		rc = -CNL_EAUTH;
		goto out;
	}
	rc = check_signature(pkey, id_token, (size_t)(d2 - id_token), sig,
	                     (size_t)n, err, errlen);
	if (rc < 0)
		goto out;

	payload = cnl_jwt_part_json(d1 + 1, (size_t)(d2 - d1 - 1));
	if (!payload) {
		cnl_seterr(err, errlen,
		           "token payload is not base64url of a JSON object");
		rc = -CNL_EAUTH;
		goto out;
	}
	memset(&id, 0, sizeof(id));
	rc = check_claims(o, payload, now_s, &id, err, errlen);
	if (rc < 0)
		goto out;
	*ret = id;
	rc = 0;
out:
	EVP_PKEY_free(pkey);
	json_decref(payload);
	json_decref(header);
	return rc;
}

bool cnl_oidc_looks_like(const char *token)
{
	const char *d1, *d2;
	json_t *h, *alg;
	size_t len;
	bool yes;

	if (!token)
		return false;
	len = strnlen(token, CNL_AUTH_JWT_MAX + 1);
	if (len > CNL_AUTH_JWT_MAX)
		return false;
	d1 = memchr(token, '.', len);
	d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - token)) : NULL;
	if (!d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - token)) ||
	    d1 - token > LOOKS_MAX)
		return false;
	h = cnl_jwt_part_json(token, (size_t)(d1 - token));
	alg = json_object_get(h, "alg");
	yes =
	    json_is_string(alg) && strcmp(json_string_value(alg), "RS256") == 0;
	json_decref(h);
	return yes;
}
