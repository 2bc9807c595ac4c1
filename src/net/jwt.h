/*
 * jwt.h - the claim checks every JSON Web Token (RFC 7519) that cnlabd
 * accepts goes through, whoever signed it: its own HS256 session tokens
 * (server/auth.h) and the RS256 ID tokens of an OpenID Connect provider
 * (server/oidc.h).  Signatures stay with their verifiers, which hold the
 * keys and the crypto; what a token *says* is judged here, once:
 *
 *   - the compact form's parts: strict base64url (common/base64.h) of a JSON
 *     object without duplicate keys (cnl_jwt_part_json());
 *   - issuer, audience and the time window (cnl_jwt_check_claims());
 *   - string claims and the user-name claim (cnl_jwt_claim_str(),
 *     cnl_jwt_claim_name(), cnl_jwt_name_valid()).
 *
 * Numeric dates must be JSON integers: fractional seconds are refused.
 * "Now" comes in as an argument, so callers (and tests) decide what time
 * it is.  Pure computation over jansson; no I/O, no global state.
 *
 * Failures are -CNL_EAUTH with a reason in @err (NULL/0 to ignore) that
 * names the claim; the reasons are for the server log, not for clients,
 * which should see one answer for every refusal.
 */
#ifndef CNL_NET_JWT_H
#define CNL_NET_JWT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Largest token looked at, in characters. */
#define CNL_JWT_MAX 8192

/* How far in the future "iat" and "nbf" may lie (clock skew), seconds. */
#define CNL_JWT_SKEW_S 60

/* Room for a CNLab user name, NUL included (= CNL_STORE_NAME_MAX). */
#define CNL_JWT_NAME_MAX 64

/*
 * cnl_jwt_part_json - decode one part of a compact token (@len characters
 * at @s): strict base64url without padding, of a JSON object without
 * duplicate keys, decoding to at most CNL_JWT_MAX bytes.  A new reference,
 * or NULL when the part is anything else.
 */
json_t *cnl_jwt_part_json(const char *s, size_t len);

/* What a token must satisfy beyond its signature. */
struct cnl_jwt_rules {
	const char *audience; /* required: "aud" is it, or an array of
	                         strings that contains it */
	const char *issuer;   /* "iss" must equal it; NULL: not compared */
	int64_t now_s;        /* Unix seconds */
	/* The token is good while now_s < exp + exp_leeway_s: 0 for tokens
	 * of our own clock, CNL_JWT_SKEW_S for another machine's. */
	int64_t exp_leeway_s;
	bool iat_required; /* else "iat" may be absent */
};

/* The dates of a token that passed; 0 for an absent "iat" or "nbf". */
struct cnl_jwt_times {
	int64_t exp;
	int64_t iat;
	int64_t nbf;
};

/*
 * cnl_jwt_check_claims - check, in this order, that the claims object
 * @payload has:
 *   1. "iss" a string equal to rules->issuer (when one is given);
 *   2. "aud" the audience, or an array of strings containing it;
 *   3. "exp" an integer, with rules->now_s < exp + rules->exp_leeway_s;
 *   4. "iat" an integer (or absent, unless required) at most
 *      CNL_JWT_SKEW_S after now;
 *   5. "nbf" absent, or an integer at most CNL_JWT_SKEW_S after now.
 * Returns 0 and the dates in *@ret (may be NULL), or -CNL_EAUTH with the
 * first failed check in @err; -EINVAL for a NULL payload, rules or
 * audience.  Comparisons cannot overflow, whatever the integers.
 */
int cnl_jwt_check_claims(const json_t *payload,
                         const struct cnl_jwt_rules *rules,
                         struct cnl_jwt_times *ret, char *err, size_t errlen);

/*
 * cnl_jwt_claim_str - the string claim @name of @payload into @dst (@cap
 * bytes, NUL included).  True when it is a string of at most @cap - 1
 * bytes with no NUL inside (and, if @required, present and not empty), or
 * when it is absent and not @required (then @dst is untouched); false
 * otherwise.
 */
bool cnl_jwt_claim_str(const json_t *payload, const char *name, bool required,
                       char *dst, size_t cap);

/*
 * cnl_jwt_name_valid - whether @s is a valid CNLab user (or project) name:
 * 1..63 bytes of A-Z a-z 0-9 . _ -, not starting with '.' or '-'.  NULL
 * is not.
 */
bool cnl_jwt_name_valid(const char *s);

/*
 * cnl_jwt_claim_name - the claim @claim of @payload as a CNLab user name
 * (cnl_jwt_name_valid()) into @dst.  Returns 0, or -CNL_EAUTH with "token
 * has no ..." or "token ... is not a valid CNLab user name" in @err.
 */
int cnl_jwt_claim_name(const json_t *payload, const char *claim,
                       char dst[CNL_JWT_NAME_MAX], char *err, size_t errlen);

#endif /* CNL_NET_JWT_H */
