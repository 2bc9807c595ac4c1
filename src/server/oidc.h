/*
 * oidc.h - verification of OpenID Connect ID tokens for cnlabd: compact JWS
 * tokens signed with RS256 by an external identity provider, checked
 * against the provider's public keys (a JWKS, RFC 7517) read from a file or
 * fetched over HTTP(S), and mapped to a CNLab user name.
 *
 * This module only verifies; routing a request's bearer token here rather
 * than to the HS256 path of auth.h (see cnl_oidc_looks_like()) and mapping
 * the identity to a store user is the caller's business.
 *
 * Return values follow errors.h.  Across this module:
 *   -EINVAL       a NULL pointer or an argument no caller should pass;
 *   -CNL_ECONFIG  an invalid cnl_oidc_config;
 *   -CNL_EPARSE   a JWKS that is not JSON, has no usable RS256 key, or has
 *                 a malformed one (the message names the key);
 *   -CNL_ESIZE    a JWKS larger than CNL_OIDC_JWKS_MAX;
 *   -EIO          a JWKS URL that could not be fetched (transport error or
 *                 an HTTP status other than 200);
 *   -CNL_EAUTH    an ID token that does not verify;
 *   -ENOMEM       an allocation failed; a negated errno for file errors.
 * Every function that takes @err, @errlen writes a NUL-terminated reason
 * there on failure (NULL/0 to ignore).  Reasons for -CNL_EAUTH are meant
 * for the server log, not for the client, which should see one answer for
 * every refusal.  Output parameters are untouched on failure.
 *
 * Thread safety: cnl_oidc_verify() and cnl_oidc_reload() may run
 * concurrently from any number of threads on one struct cnl_oidc; only
 * cnl_oidc_new() and cnl_oidc_free() need exclusive use.
 */
#ifndef CNL_SERVER_OIDC_H
#define CNL_SERVER_OIDC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest JWKS document read from a file or accepted from a URL, bytes. */
#define CNL_OIDC_JWKS_MAX (256 * 1024)
/* Most keys a JWKS may list (usable or not). */
#define CNL_OIDC_KEYS_MAX 64
/* Whole-transfer timeout of a JWKS fetch, in milliseconds. */
#define CNL_OIDC_FETCH_TIMEOUT_MS 5000
/* Least time between two fetches caused by tokens with an unknown kid. */
#define CNL_OIDC_REFETCH_S 60
/* Accepted RSA modulus sizes, bits (RFC 7518 section 3.3 asks >= 2048). */
#define CNL_OIDC_RSA_BITS_MIN 2048
#define CNL_OIDC_RSA_BITS_MAX 8192

/* Claim that suggests a new user's name when the config leaves it NULL. */
#define CNL_OIDC_USERNAME_CLAIM "preferred_username"

struct cnl_oidc_config {
	const char *issuer;   /* required: the token's "iss", exactly */
	const char *audience; /* required: must appear in "aud" */
	/* Exactly one of the two: a JWKS file, or an http:// or https:// URL
	 * fetched with net/client.h (CNL_OIDC_FETCH_TIMEOUT_MS,
	 * CNL_OIDC_JWKS_MAX, no redirects, TLS peer and host verified for
	 * https). */
	const char *jwks_file;
	const char *jwks_url;
	/* The claim whose value is the CNLab user name; NULL means
	 * CNL_OIDC_USERNAME_CLAIM. */
	const char *username_claim;
};

/* Sizes of the identity's strings, NUL included. */
#define CNL_OIDC_SUB_MAX      128
#define CNL_OIDC_USERNAME_MAX 64 /* = CNL_STORE_NAME_MAX */
#define CNL_OIDC_EMAIL_MAX    128

/* Largest issuer URL, NUL included. */
#define CNL_OIDC_ISS_MAX 256

/*
 * Who a verified ID token names.  The identity is the pair (iss, sub);
 * username and email are hints for display and for the name of a user
 * created at first sign-in, never a key (api_session.c).
 */
struct cnl_oidc_identity {
	char iss[CNL_OIDC_ISS_MAX];           /* the configured issuer */
	char sub[CNL_OIDC_SUB_MAX];           /* provider's subject id */
	char username[CNL_OIDC_USERNAME_MAX]; /* valid CNLab name, or "" */
	char email[CNL_OIDC_EMAIL_MAX];       /* "" when absent */
	int64_t exp;                          /* token expiry, Unix seconds */
};

struct cnl_oidc;

/*
 * cnl_oidc_new - check @cfg (the strings are copied), load the JWKS and
 * return a verifier in *@ret.  A JWKS is a JSON object whose "keys" array
 * holds at most CNL_OIDC_KEYS_MAX objects.  Keys with a "kty" other than
 * "RSA", a "use" other than "sig" or an "alg" other than "RS256" are
 * skipped; every other key must have a non-empty "kid" (unique within the
 * set, under CNL_OIDC_SUB_MAX bytes) and strict base64url "n" and "e" with
 * a modulus of CNL_OIDC_RSA_BITS_MIN..MAX bits and an odd exponent, or the
 * whole set is refused.  At least one key must be usable.
 */
int cnl_oidc_new(const struct cnl_oidc_config *cfg, struct cnl_oidc **ret,
                 char *err, size_t errlen);

/* cnl_oidc_free - release @o; NULL is fine. */
void cnl_oidc_free(struct cnl_oidc *o);

/*
 * cnl_oidc_reload - read the JWKS file again or fetch the URL again, with
 * the rules of cnl_oidc_new().  All or nothing: on failure the keys in use
 * stay as they were.  Verifications running meanwhile finish with the key
 * they found.
 */
int cnl_oidc_reload(struct cnl_oidc *o, char *err, size_t errlen);

/*
 * cnl_oidc_verify - check the ID token @id_token at time @now_s (Unix
 * seconds) and describe its user in @ret.  Accepted only if all hold,
 * otherwise -CNL_EAUTH with the reason in @err:
 *   - at most CNL_AUTH_JWT_MAX characters, three '.'-separated parts, each
 *     strict base64url; header and payload JSON objects without duplicate
 *     keys;
 *   - the header's "alg" is exactly "RS256" (so "none", "HS256" - the
 *     public-key-as-HMAC-secret confusion - and everything else is refused
 *     whatever the signature), no "crit";
 *   - the header's "kid" names a key of the set; a token without "kid" is
 *     accepted only when the set holds exactly one key;
 *   - the signature, of the modulus' length, is a valid RSASSA-PKCS1-v1_5
 *     SHA-256 signature of the first two parts under that key;
 *   - "iss" equals the configured issuer; "aud" is that audience or an
 *     array of strings containing it; "sub" is a non-empty string under
 *     CNL_OIDC_SUB_MAX bytes;
 *   - "exp" is an integer with @now_s < exp + CNL_AUTH_JWT_SKEW_S; "iat" is
 *     an integer no more than CNL_AUTH_JWT_SKEW_S ahead of @now_s; "nbf",
 *     if present, too (dates are JSON integers, as in auth.h);
 *   - "email", if present, is a string under CNL_OIDC_EMAIL_MAX bytes.
 * The username claim is copied to ret->username when it is a valid CNLab
 * name (1..63 of A-Z a-z 0-9 . _ -, not starting with '.' or '-'), else
 * ret->username is "": it is a hint, not part of the identity.
 * When the kid is unknown and the keys come from a URL, the JWKS is fetched
 * again (key rotation) and the token checked once more; such fetches happen
 * at most once per CNL_OIDC_REFETCH_S seconds of @now_s, so a flood of
 * made-up kids costs one fetch a minute.  -EINVAL for NULL arguments, -EIO
 * when libcrypto fails.
 */
int cnl_oidc_verify(struct cnl_oidc *o, const char *id_token, int64_t now_s,
                    struct cnl_oidc_identity *ret, char *err, size_t errlen);

/*
 * cnl_oidc_looks_like - a cheap routing test: is @token shaped as a JWT
 * (three '.'-separated parts, within CNL_AUTH_JWT_MAX) whose header decodes
 * to a JSON object with "alg":"RS256"?  Checks no signature and no claim;
 * a true answer only means "verify this with cnl_oidc_verify(), not with
 * the HS256 path".  NULL gives false.
 */
bool cnl_oidc_looks_like(const char *token);

#endif /* CNL_SERVER_OIDC_H */
