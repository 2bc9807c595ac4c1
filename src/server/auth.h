/*
 * auth.h - authentication primitives of the control plane (cnlabd):
 * password hashing with scrypt, JSON Web Tokens signed with HS256, and
 * opaque API tokens for scripts, of which the store keeps only a digest.
 *
 * Everything here is pure computation over OpenSSL's libcrypto and jansson:
 * no I/O, no global state, and the current time comes in as an argument so
 * that callers (and tests) decide what "now" is.
 *
 * Return values follow errors.h: >= 0 on success, a negated errno or CNL_E*
 * code on failure.  Across this module:
 *   -EINVAL       a NULL pointer or an argument no caller should pass;
 *   -ENOBUFS      an output buffer too small for the result;
 *   -CNL_ESIZE    a password or input outside its length limits;
 *   -CNL_EPARSE   a malformed stored hash or base64url text;
 *   -CNL_EAUTH    a password or token that does not authenticate;
 *   -ENOMEM, -EIO an allocation or a libcrypto primitive failed.
 * Output parameters come last and are untouched on failure, except that a
 * text output buffer may hold a partial result when -ENOBUFS is returned.
 */
#ifndef CNL_SERVER_AUTH_H
#define CNL_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "net/jwt.h"

/* ------------------------------------------------------------------------ */
/* Passwords: scrypt in a self-describing string                            */
/* ------------------------------------------------------------------------ */

/* Password length limits in bytes; outside them -CNL_ESIZE. */
#define CNL_AUTH_PASSWORD_MIN 1
#define CNL_AUTH_PASSWORD_MAX 1024

/* Cost of new hashes: N = 2^15, r = 8, p = 1 (32 MiB, ~0.1 s). */
#define CNL_AUTH_SCRYPT_LN 15
#define CNL_AUTH_SCRYPT_R  8
#define CNL_AUTH_SCRYPT_P  1

/* Accepted ranges when hashing with a chosen cost or verifying a string. */
#define CNL_AUTH_SCRYPT_LN_MIN 10
#define CNL_AUTH_SCRYPT_LN_MAX 20
#define CNL_AUTH_SCRYPT_RP_MIN 1
#define CNL_AUTH_SCRYPT_RP_MAX 16
/* Parameters within the ranges whose 128 * r * N exceeds this are refused. */
#define CNL_AUTH_SCRYPT_MAXMEM (UINT64_C(1) << 30)

#define CNL_AUTH_SALT_LEN      16 /* bytes of RAND_bytes salt in new hashes */
#define CNL_AUTH_KEY_LEN       32 /* bytes of derived key in new hashes */

/*
 * Room for a stored hash: "$scrypt$ln=NN,r=NN,p=NN$" (24) + salt (22) + "$"
 * + key (43) + NUL fits with margin; salts of up to 64 bytes (the most
 * verify accepts) fit too.
 */
#define CNL_AUTH_HASH_MAX 256

/*
 * cnl_auth_password_hash - hash @password with a fresh random salt at the
 * default cost, writing a NUL-terminated string of the form
 *   $scrypt$ln=15,r=8,p=1$<salt>$<key>
 * where salt (16 bytes) and key (32 bytes) are standard base64 (RFC 4648
 * section 4, '+' and '/') without padding, as in the PHC string format.
 * Returns 0, -CNL_ESIZE for a password outside the length limits, -ENOBUFS
 * when @outlen < the string's length + 1 (CNL_AUTH_HASH_MAX always fits),
 * -EIO when the random generator or scrypt fails.
 */
int cnl_auth_password_hash(const char *password, char *out, size_t outlen);

/*
 * cnl_auth_password_hash_cost - as cnl_auth_password_hash() but with
 * N = 2^@ln (r = 8, p = 1); -EINVAL for @ln outside CNL_AUTH_SCRYPT_LN_MIN..
 * CNL_AUTH_SCRYPT_LN_MAX.  Meant for tests, which use the cheapest cost.
 */
int cnl_auth_password_hash_cost(const char *password, int ln, char *out,
                                size_t outlen);

/*
 * cnl_auth_password_decoy - a string in the layout of
 * cnl_auth_password_hash_cost() at cost @ln, with a random salt and a random
 * key instead of a derived one: no password verifies against it, and
 * checking one costs what checking a real hash of that cost does.  What a
 * login for an unknown user is checked against, so that it takes as long
 * as one for a known user; made without the key derivation, which took
 * most of an idle cnlabd's start.  Errors as cnl_auth_password_hash_cost().
 */
int cnl_auth_password_decoy(int ln, char *out, size_t outlen);

/*
 * cnl_auth_password_verify - check @password against a string made by
 * cnl_auth_password_hash().  The cost parameters are read from the string,
 * so hashes stay valid when the default cost is raised.  Returns 0 on a
 * match (compared in constant time), -CNL_EAUTH on a mismatch, -CNL_ESIZE
 * for a password outside the length limits, -CNL_EPARSE for a malformed
 * string: wrong prefix or layout, invalid base64, salt not 8..64 bytes, key
 * not exactly CNL_AUTH_KEY_LEN bytes (so a truncated string never
 * verifies), ln outside 10..20, r or p outside 1..16, or more than
 * CNL_AUTH_SCRYPT_MAXMEM of memory.
 */
int cnl_auth_password_verify(const char *password, const char *stored);

/* ------------------------------------------------------------------------ */
/* JSON Web Tokens (RFC 7519), HS256 only                                   */
/* ------------------------------------------------------------------------ */

/* Largest token cnl_auth_jwt_verify() looks at, in characters. */
#define CNL_AUTH_JWT_MAX CNL_JWT_MAX

/* Each string claim, NUL included. */
#define CNL_AUTH_CLAIM_MAX 128

/* How far in the future "iat" and "nbf" may lie (clock skew), in seconds. */
#define CNL_AUTH_JWT_SKEW_S CNL_JWT_SKEW_S

/*
 * The claims CNLab puts in a token.  Strings are NUL-terminated; an empty
 * string means "absent" for the optional ones (iss, proj, role, jti).
 */
struct cnl_auth_claims {
	char sub[CNL_AUTH_CLAIM_MAX];  /* user id; required */
	char aud[CNL_AUTH_CLAIM_MAX];  /* audience; required */
	char iss[CNL_AUTH_CLAIM_MAX];  /* issuer; optional */
	char proj[CNL_AUTH_CLAIM_MAX]; /* project; optional */
	char role[CNL_AUTH_CLAIM_MAX]; /* role in the project; optional */
	/* Token id; optional.  cnlabd's session tokens carry the id of their
	 * server-side session (api_session.c), checked on every request. */
	char jti[CNL_AUTH_CLAIM_MAX];
	int64_t iat; /* issued at, Unix seconds */
	int64_t exp; /* expiry, Unix seconds; required */
};

/*
 * cnl_auth_jwt_sign - make a compact JWS token with the header
 * {"alg":"HS256","typ":"JWT"} and the claims of @c, signed with HMAC-SHA256
 * under @key.  Writes the NUL-terminated token to @out and returns its
 * length.  -EINVAL for an empty key, an empty sub or aud, an exp <= 0 or
 * <= iat, or a string claim not NUL-terminated within its field; -ENOBUFS
 * when @outlen is too small; -CNL_ESIZE when the token would exceed
 * CNL_AUTH_JWT_MAX.
 */
int cnl_auth_jwt_sign(const struct cnl_auth_claims *c, const uint8_t *key,
                      size_t keylen, char *out, size_t outlen);

/*
 * cnl_auth_jwt_verify - check @token and return its claims in @ret.
 * Accepted only if all hold; otherwise -CNL_EAUTH and @ret untouched:
 *   - at most CNL_AUTH_JWT_MAX characters, exactly three '.'-separated
 *     parts, each strict base64url (cnl_b64_decode() of common/base64.h
 *     with CNL_B64_URL);
 *   - the header is a JSON object without duplicate keys whose "alg" is the
 *     string "HS256" exactly (so "none" in any case, RS256 and every other
 *     algorithm are refused whatever the signature), with no "crit";
 *   - the signature is 32 bytes equal (in constant time) to HMAC-SHA256
 *     under @key of the first two parts as sent;
 *   - the payload is a JSON object without duplicate keys and passes
 *     cnl_jwt_check_claims() (net/jwt.h) with no issuer and no leeway:
 *     "exp" is an integer > @now_s; "iat" and "nbf", if present, are
 *     integers <= @now_s + CNL_AUTH_JWT_SKEW_S; "aud" is a string equal to
 *     @audience or an array of strings containing it; "sub" is a non-empty
 *     string; "iss", "proj", "role", "jti", if present, are strings; every
 * string claim fits in CNL_AUTH_CLAIM_MAX with no NUL inside.  Other claims are
 * ignored.  Numeric dates must be JSON integers: fractional seconds are
 * refused. On success ret->aud is @audience and absent optional claims are
 * empty (iat 0).  -EINVAL for a NULL argument or an empty key or audience.
 */
int cnl_auth_jwt_verify(const char *token, const uint8_t *key, size_t keylen,
                        const char *audience, int64_t now_s,
                        struct cnl_auth_claims *ret);

/*
 * cnl_auth_hs256 - base64url(HMAC-SHA256(@key, @input)) into @out (44 bytes
 * suffice): the third part of a token whose first two parts are @input.
 * Exposed so the signing step can be checked against RFC 7515's example.
 * Returns the length written (43), -EINVAL, -ENOBUFS or -EIO.
 */
int cnl_auth_hs256(const uint8_t *key, size_t keylen, const char *input,
                   size_t inlen, char *out, size_t outlen);

/* ------------------------------------------------------------------------ */
/* API tokens                                                               */
/* ------------------------------------------------------------------------ */

#define CNL_AUTH_TOKEN_PREFIX "cnl_"
/* "cnl_" + 43 base64url characters of 32 random bytes. */
#define CNL_AUTH_TOKEN_LEN 47
/* Room for a token, NUL included. */
#define CNL_AUTH_TOKEN_MAX 48
/* Room for a hex SHA-256 digest, NUL included. */
#define CNL_AUTH_DIGEST_MAX 65

/*
 * cnl_auth_token_new - a fresh API token "cnl_" + base64url of 32 bytes from
 * RAND_bytes, NUL-terminated in @out.  Shown to the user once; only its
 * digest is stored.  Returns 0, -ENOBUFS when @outlen < CNL_AUTH_TOKEN_MAX,
 * -EIO when the random generator fails.
 */
int cnl_auth_token_new(char *out, size_t outlen);

/*
 * cnl_auth_token_check - 0 when @token has the form cnl_auth_token_new()
 * produces, else -CNL_EPARSE.  Lets a server refuse junk before hashing.
 */
int cnl_auth_token_check(const char *token);

/*
 * cnl_auth_token_digest - lowercase hex SHA-256 of the bytes of @token
 * (any string up to CNL_AUTH_JWT_MAX bytes, so the function is also usable
 * on other secrets), NUL-terminated.  Returns 0, -EINVAL, -CNL_ESIZE for a
 * longer string, -EIO.  Tokens hold 256 random bits, so a plain fast hash is
 * enough: there is nothing to brute-force, unlike passwords.
 */
int cnl_auth_token_digest(const char *token, char out[CNL_AUTH_DIGEST_MAX]);

/* ------------------------------------------------------------------------ */
/* Collector tokens                                                         */
/* ------------------------------------------------------------------------ */

#define CNL_AUTH_COLLECT_PREFIX "cnlc_"
/* "cnlc_" + 43 base64url characters, NUL included. */
#define CNL_AUTH_COLLECT_MAX 49

/*
 * cnl_auth_collect_token - the token with which the collector of a
 * Kubernetes run pod uploads the artifacts of job @job under fencing
 * epoch @epoch, and nothing else: "cnlc_" + base64url(HMAC-SHA256) of the
 * two under a key derived from cnlabd's @secret.  Nothing is stored: a
 * token is good while that job holds that epoch, and dies with it (the
 * job's end, a pre-emption, a requeue).  0, or -EINVAL / -EIO.
 * cnl_auth_collect_check - whether @token is that token (compared in
 * constant time).
 */
int cnl_auth_collect_token(const uint8_t *secret, size_t len, const char *job,
                           int64_t epoch, char out[CNL_AUTH_COLLECT_MAX]);
bool cnl_auth_collect_check(const uint8_t *secret, size_t len, const char *job,
                            int64_t epoch, const char *token);

#endif /* CNL_SERVER_AUTH_H */
