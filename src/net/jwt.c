/*
 * jwt.c - JWT claim checks shared by every verifier (see jwt.h).
 *
 * The checks were written twice before, for HS256 session tokens and for
 * OIDC ID tokens, and differed only where the tokens do: an ID token comes
 * from another machine's clock, so its "exp" gets CNL_JWT_SKEW_S of
 * leeway, it must carry "iat", and its issuer is checked.  Those are the
 * rules' fields; everything else is one code path.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/label.h"
#include "common/util.h"
#include "net/jwt.h"

/* Decoded parts are at most 3/4 of the token. */
#define PART_MAX (CNL_JWT_MAX / 4 * 3 + 3)

json_t *cnl_jwt_part_json(const char *s, size_t len)
{
	uint8_t buf[PART_MAX];
	json_t *j;
	int n;

	n = cnl_b64_decode(s, len, CNL_B64_URL, buf, sizeof(buf));
	if (n < 0)
		return NULL;
	j = json_loadb((const char *)buf, (size_t)n, JSON_REJECT_DUPLICATES,
	               NULL);
	if (j && !json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* An integer claim into *@dst; 0 absent, 1 read, -1 not an integer. */
static int get_int(const json_t *o, const char *name, int64_t *dst)
{
	json_t *v = json_object_get(o, name);

	if (!v)
		return 0;
	if (!json_is_integer(v))
		return -1;
	*dst = (int64_t)json_integer_value(v);
	return 1;
}

/* @t lies more than the allowed skew after @now (overflow-safe). */
static bool too_far_ahead(int64_t t, int64_t now)
{
	return t > now && (uint64_t)t - (uint64_t)now > CNL_JWT_SKEW_S;
}

/* @exp lies @leeway or more before @now (overflow-safe). */
static bool expired(int64_t exp, int64_t now, int64_t leeway)
{
	return exp <= now && (uint64_t)now - (uint64_t)exp >=
	                         (uint64_t)(leeway > 0 ? leeway : 0);
}

static bool aud_ok(const json_t *o, const char *audience)
{
	json_t *aud = json_object_get(o, "aud"), *e;
	bool found = false;
	size_t i;

	if (json_is_string(aud))
		return strcmp(json_string_value(aud), audience) == 0;
	if (!json_is_array(aud))
		return false;
	json_array_foreach (aud, i, e) {
		if (!json_is_string(e))
			return false;
		if (strcmp(json_string_value(e), audience) == 0)
			found = true;
	}
	return found;
}

int cnl_jwt_check_claims(const json_t *p, const struct cnl_jwt_rules *rules,
                         struct cnl_jwt_times *ret, char *err, size_t errlen)
{
	struct cnl_jwt_times t = {0};
	json_t *iss;
	int r;

	if (!p || !rules || !rules->audience) {
		cnl_seterr(err, errlen, "jwt: NULL argument");
		return -EINVAL;
	}
	iss = json_object_get(p, "iss");
	if (rules->issuer && (!json_is_string(iss) ||
	                      strcmp(json_string_value(iss), rules->issuer))) {
		cnl_seterr(err, errlen, "token \"iss\" is not the issuer %s",
		           rules->issuer);
		return -CNL_EAUTH;
	}
	if (!aud_ok(p, rules->audience)) {
		cnl_seterr(err, errlen, "token \"aud\" does not contain %s",
		           rules->audience);
		return -CNL_EAUTH;
	}
	if (get_int(p, "exp", &t.exp) != 1) {
		cnl_seterr(err, errlen,
		           "token \"exp\" missing or not an integer");
		return -CNL_EAUTH;
	}
	if (expired(t.exp, rules->now_s, rules->exp_leeway_s)) {
		cnl_seterr(
		    err, errlen, "token expired %lld s ago",
		    (long long)((uint64_t)rules->now_s - (uint64_t)t.exp));
		return -CNL_EAUTH;
	}
	r = get_int(p, "iat", &t.iat);
	if (r < 0 || (r == 0 && rules->iat_required)) {
		cnl_seterr(err, errlen,
		           "token \"iat\" missing or not an integer");
		return -CNL_EAUTH;
	}
	if (too_far_ahead(t.iat, rules->now_s)) {
		cnl_seterr(err, errlen, "token \"iat\" is in the future");
		return -CNL_EAUTH;
	}
	r = get_int(p, "nbf", &t.nbf);
	if (r < 0 || (r == 1 && too_far_ahead(t.nbf, rules->now_s))) {
		cnl_seterr(err, errlen,
		           "token \"nbf\" is in the future or not an integer");
		return -CNL_EAUTH;
	}
	if (ret)
		*ret = t;
	return 0;
}

bool cnl_jwt_claim_str(const json_t *o, const char *name, bool required,
                       char *dst, size_t cap)
{
	json_t *v = json_object_get(o, name);
	size_t n;

	if (!v)
		return !required;
	if (!json_is_string(v))
		return false;
	n = json_string_length(v);
	if (n >= cap || (required && n == 0) ||
	    strlen(json_string_value(v)) != n)
		return false;
	memcpy(dst, json_string_value(v), n + 1);
	return true;
}

/* A name is a label (common/label.h): the same rule, the same size. */
_Static_assert(CNL_JWT_NAME_MAX == CNL_LABEL_MAX,
               "JWT names and labels share one rule and size");

bool cnl_jwt_name_valid(const char *s)
{
	return cnl_label_valid(s);
}

int cnl_jwt_claim_name(const json_t *p, const char *claim,
                       char dst[CNL_JWT_NAME_MAX], char *err, size_t errlen)
{
	/* One byte larger than a name, so a 64-byte value is seen whole and
	 * refused as too long rather than cut. */
	char name[CNL_JWT_NAME_MAX + 1] = "";

	if (!json_object_get(p, claim)) {
		cnl_seterr(err, errlen, "token has no \"%s\" claim", claim);
		return -CNL_EAUTH;
	}
	if (!cnl_jwt_claim_str(p, claim, true, name, sizeof(name)) ||
	    !cnl_jwt_name_valid(name)) {
		cnl_seterr(err, errlen,
		           "token \"%s\" is not a valid CNLab user name",
		           claim);
		return -CNL_EAUTH;
	}
	memcpy(dst, name, strlen(name) + 1);
	return 0;
}
