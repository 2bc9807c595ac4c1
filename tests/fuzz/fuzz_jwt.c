/*
 * fuzz_jwt.c - fuzz target for the JSON Web Token parser and verifiers:
 * the input is a compact token as a client would send it in
 * "Authorization: Bearer".  It goes through
 *   - cnl_auth_jwt_verify() as sent (server/auth.c: cnlabd's HS256
 *     sessions), which must refuse it unless it is signed with our key;
 *   - the same header and payload signed here with the key, so the checks
 *     past the signature are reached: what is accepted must say what the
 *     verifier promises (a subject, an expiry in the future);
 *   - each part through cnl_jwt_part_json() and a payload through
 *     cnl_jwt_check_claims(), cnl_jwt_claim_str() and
 *     cnl_jwt_claim_name() (net/jwt.c), as the OIDC verifier uses them.
 *
 * Built with libFuzzer (-DCNL_FUZZ=ON) and with replay.c's main(), as
 * fuzz_http.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/jwt.h"
#include "server/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t key[] = "fuzz-key-0123456789abcdef0123456789";
#define NOW 1700000000

static void claims(const json_t *payload)
{
	struct cnl_jwt_rules rules = {.audience = "cnlab",
	                              .issuer = "https://idp.example",
	                              .now_s = NOW,
	                              .exp_leeway_s = CNL_JWT_SKEW_S};
	struct cnl_jwt_times t;
	char err[256], s[CNL_JWT_NAME_MAX];

	if (cnl_jwt_check_claims(payload, &rules, &t, err, sizeof(err)) == 0 &&
	    !(NOW < t.exp + CNL_JWT_SKEW_S))
		abort();
	rules.issuer = NULL;
	rules.iat_required = true;
	(void)cnl_jwt_check_claims(payload, &rules, NULL, err, sizeof(err));
	if (cnl_jwt_claim_str(payload, "sub", true, s, sizeof(s)) &&
	    (!s[0] || strlen(s) >= sizeof(s)))
		abort();
	if (cnl_jwt_claim_name(payload, "preferred_username", s, err,
	                       sizeof(err)) == 0 &&
	    !cnl_jwt_name_valid(s))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cnl_auth_claims c;
	char *tok, *signed_tok, *dot1, *dot2;
	size_t n;

	if (size > 2 * CNL_JWT_MAX)
		return 0;
	if (!(tok = malloc(size + 1)))
		abort();
	memcpy(tok, data, size);
	tok[size] = '\0';
	if (cnl_auth_jwt_verify(tok, key, sizeof(key) - 1, "cnlab", NOW, &c) ==
	    0) {
		/* Only a token signed with our key may pass: the fuzzer does
		 * not know it, so a pass is a forgery. */
		fprintf(stderr, "fuzz_jwt: an unsigned token was accepted\n");
		abort();
	}
	/* Each part on its own. */
	for (const char *p = tok;;) {
		const char *e = strchr(p, '.');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		json_t *j = cnl_jwt_part_json(p, len);

		if (j) {
			claims(j);
			json_decref(j);
		}
		if (!e)
			break;
		p = e + 1;
	}
	/* Header and payload as sent, signed with the key. */
	dot1 = strchr(tok, '.');
	dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
	if (dot1) {
		if (dot2)
			*dot2 = '\0';
		n = strlen(tok) + 64;
		if (!(signed_tok = malloc(n)))
			abort();
		snprintf(signed_tok, n, "%s.", tok);
		if (cnl_auth_hs256(key, sizeof(key) - 1, tok, strlen(tok),
		                   signed_tok + strlen(signed_tok),
		                   n - strlen(signed_tok)) > 0 &&
		    cnl_auth_jwt_verify(signed_tok, key, sizeof(key) - 1,
		                        "cnlab", NOW, &c) == 0 &&
		    (!c.sub[0] || c.exp <= NOW || strcmp(c.aud, "cnlab") != 0))
			abort();
		free(signed_tok);
	}
	free(tok);
	return 0;
}
