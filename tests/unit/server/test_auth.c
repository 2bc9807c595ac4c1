/*
 * test_auth.c - cnlabd's authentication primitives: scrypt password hashes
 * (round trip, salting, the RFC 7914 known answer, malformed strings and
 * limits), HS256 signing against RFC 7515's
 * example, JWT round trip and every refusal (each evil token is built here
 * by hand, with a valid HMAC where the point is that the signature alone
 * must not be enough), and API token format and digest.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "server/auth.h"

#define NOW INT64_C(1700000000)
#define AUD "cnlabd"

static const uint8_t key1[] = "test secret number one, 32 bytes";
static const uint8_t key2[] = "test secret number two, 32 bytes";
#define KEYLEN (sizeof(key1) - 1)

/* ------------------------------------------------------------------------ */
/* Passwords                                                                */
/* ------------------------------------------------------------------------ */

static void test_password_round_trip_default_cost(void **state)
{
	char h[CNL_AUTH_HASH_MAX];

	assert_int_equal(cnl_auth_password_hash("correct horse", h, sizeof(h)),
	                 0);
	assert_int_equal(strncmp(h, "$scrypt$ln=15,r=8,p=1$", 22), 0);
	/* 22 + 22 salt characters + '$' + 43 key characters. */
	assert_int_equal(strlen(h), 22 + 22 + 1 + 43);
	assert_int_equal(cnl_auth_password_verify("correct horse", h), 0);
	assert_int_equal(cnl_auth_password_verify("correct horsE", h),
	                 -CNL_EAUTH);
}

static void test_password_wrong_and_salted(void **state)
{
	char a[CNL_AUTH_HASH_MAX], b[CNL_AUTH_HASH_MAX];

	assert_int_equal(
	    cnl_auth_password_hash_cost("hunter2", 10, a, sizeof(a)), 0);
	assert_int_equal(
	    cnl_auth_password_hash_cost("hunter2", 10, b, sizeof(b)), 0);
	assert_string_not_equal(a, b);
	assert_int_equal(cnl_auth_password_verify("hunter2", a), 0);
	assert_int_equal(cnl_auth_password_verify("hunter2", b), 0);
	assert_int_equal(cnl_auth_password_verify("hunter3", a), -CNL_EAUTH);
	assert_int_equal(cnl_auth_password_verify("hunter", a), -CNL_EAUTH);
	assert_int_equal(cnl_auth_password_verify("hunter22", a), -CNL_EAUTH);

	/* A raised cost is recorded in the string and honoured by verify. */
	assert_int_equal(
	    cnl_auth_password_hash_cost("hunter2", 11, a, sizeof(a)), 0);
	assert_int_equal(strncmp(a, "$scrypt$ln=11,", 14), 0);
	assert_int_equal(cnl_auth_password_verify("hunter2", a), 0);

	assert_int_equal(cnl_auth_password_hash_cost("x", 9, a, sizeof(a)),
	                 -EINVAL);
	assert_int_equal(cnl_auth_password_hash_cost("x", 21, a, sizeof(a)),
	                 -EINVAL);
	assert_int_equal(cnl_auth_password_hash_cost("x", 10, a, 40), -ENOBUFS);
}

/* The decoy that logins of unknown users are checked against: a string
 * verify reads as a real hash of the same cost and layout (so it runs the
 * whole derivation), random each time, that no password matches. */
static void test_password_decoy(void **state)
{
	char d[CNL_AUTH_HASH_MAX], e[CNL_AUTH_HASH_MAX], h[CNL_AUTH_HASH_MAX];
	const char *tries[] = {"x", "no user has this password", "hunter2"};

	(void)state;
	assert_int_equal(cnl_auth_password_decoy(10, d, sizeof(d)), 0);
	assert_int_equal(cnl_auth_password_decoy(10, e, sizeof(e)), 0);
	assert_string_not_equal(d, e);
	assert_int_equal(
	    cnl_auth_password_hash_cost("hunter2", 10, h, sizeof(h)), 0);
	assert_int_equal(strlen(d), strlen(h));
	/* Same prefix up to the salt: "$scrypt$ln=10,r=8,p=1$". */
	assert_int_equal(strncmp(d, h, strchr(h + 8, '$') - h + 1), 0);
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++)
		assert_int_equal(cnl_auth_password_verify(tries[i], d),
		                 -CNL_EAUTH);
	assert_int_equal(cnl_auth_password_decoy(9, d, sizeof(d)), -EINVAL);
	assert_int_equal(cnl_auth_password_decoy(21, d, sizeof(d)), -EINVAL);
	assert_int_equal(cnl_auth_password_decoy(10, d, 40), -ENOBUFS);
	assert_int_equal(cnl_auth_password_decoy(10, NULL, 40), -EINVAL);
}

/*
 * RFC 7914 section 12, third vector, written by hand in our format.  Our
 * keys are 32 bytes, so the key is the first 32 of the RFC's 64 bytes
 * (scrypt's output for dkLen 32 is that prefix).
 */
static void test_password_rfc7914_known_answer(void **state)
{
	static const char stored[] =
	    "$scrypt$ln=14,r=8,p=1$U29kaXVtQ2hsb3JpZGU$"
	    "cCO9yzr9c0hGHAbNgf046/2o+7qQT44+qbVD9lRdofI";
	static const char stored64[] =
	    "$scrypt$ln=14,r=8,p=1$U29kaXVtQ2hsb3JpZGU$"
	    "cCO9yzr9c0hGHAbNgf046/"
	    "2o+7qQT44+qbVD9lRdofLVQylVYT8Pz2LUlwUkKpr55h6"
	    "F3A1lHkDfzwF7RVdYhw";

	assert_int_equal(cnl_auth_password_verify("pleaseletmein", stored64),
	                 -CNL_EPARSE);
	assert_int_equal(cnl_auth_password_verify("pleaseletmein", stored), 0);
	assert_int_equal(cnl_auth_password_verify("pleaseletmeout", stored),
	                 -CNL_EAUTH);
}

static void test_password_malformed(void **state)
{
	static const char *const bad[] = {
	    "",
	    "scrypt",
	    "$scrypt$",
	    "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
	    "$scrypt2$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    /* parameters out of range or badly written */
	    "$scrypt$ln=9,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=21,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=0,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=17,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=0$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=17$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=20,r=16,p=1$AAAAAAAAAAAAAAAAAAAAAA$" /* 2 GiB */
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=100,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=-1,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$r=8,ln=10,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    /* bad base64: padding, foreign characters, url alphabet */
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA==$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAA*AAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAA-_AAAAAAAAAAAAAAAAAAAAA",
	    /* salt or key missing, too short, or followed by more fields */
	    "$scrypt$ln=10,r=8,p=1$$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$",
	    "$scrypt$ln=10,r=8,p=1$AAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAA",
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$"
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA$AAAA",
	    "$scrypt$ln=10,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$" /* 33-byte key */
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	};
	char h[CNL_AUTH_HASH_MAX], cut[CNL_AUTH_HASH_MAX];
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = cnl_auth_password_verify("pw", bad[i]);

		if (rc != -CNL_EPARSE)
			print_message("stored[%zu] = %s\n", i, bad[i]);
		assert_int_equal(rc, -CNL_EPARSE);
	}

	/* Every truncation of a real hash is malformed; none verifies. */
	assert_int_equal(cnl_auth_password_hash_cost("pw", 10, h, sizeof(h)),
	                 0);
	n = strlen(h);
	for (size_t len = 0; len < n; len++) {
		int rc;

		memcpy(cut, h, len);
		cut[len] = '\0';
		rc = cnl_auth_password_verify("pw", cut);
		assert_int_equal(rc, -CNL_EPARSE);
	}
	assert_int_equal(cnl_auth_password_verify("pw", h), 0);
}

static void test_password_length_limits(void **state)
{
	char pw[CNL_AUTH_PASSWORD_MAX + 2];
	char h[CNL_AUTH_HASH_MAX];

	memset(pw, 'p', sizeof(pw));
	pw[CNL_AUTH_PASSWORD_MAX + 1] = '\0'; /* 1025 bytes */
	assert_int_equal(cnl_auth_password_hash_cost(pw, 10, h, sizeof(h)),
	                 -CNL_ESIZE);
	assert_int_equal(cnl_auth_password_hash_cost("", 10, h, sizeof(h)),
	                 -CNL_ESIZE);

	pw[CNL_AUTH_PASSWORD_MAX] = '\0'; /* 1024 bytes: the most allowed */
	assert_int_equal(cnl_auth_password_hash_cost(pw, 10, h, sizeof(h)), 0);
	assert_int_equal(cnl_auth_password_verify(pw, h), 0);
	pw[CNL_AUTH_PASSWORD_MAX] = 'p';
	assert_int_equal(cnl_auth_password_verify(pw, h), -CNL_ESIZE);
	assert_int_equal(cnl_auth_password_verify("", h), -CNL_ESIZE);
	assert_string_equal(cnl_errname(-CNL_EAUTH), "CNL_EAUTH");
	assert_string_equal(cnl_strerror(-CNL_EAUTH), "authentication failed");
}

/* ------------------------------------------------------------------------ */
/* JWT                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Build "b64(header).b64(payload).sig" by hand.  With a key the signature
 * is a correct HMAC-SHA256 made with OpenSSL directly, so a refusal cannot
 * be blamed on the signature; without one the third part is empty.
 */
static void forge(const char *header, const char *payload, const uint8_t *key,
                  size_t keylen, char *out, size_t outlen)
{
	uint8_t mac[32];
	unsigned int maclen = 0;
	int n, pos;

	n = cnl_b64_encode(header, strlen(header), CNL_B64_URL, out, outlen);
	assert_true(n >= 0);
	pos = n;
	out[pos++] = '.';
	n = cnl_b64_encode(payload, strlen(payload), CNL_B64_URL, out + pos,
	                   outlen - (size_t)pos);
	assert_true(n >= 0);
	pos += n;
	out[pos++] = '.';
	out[pos] = '\0';
	if (!key)
		return;
	assert_non_null(HMAC(EVP_sha256(), key, (int)keylen,
	                     (const unsigned char *)out, (size_t)pos - 1, mac,
	                     &maclen));
	assert_int_equal(maclen, 32);
	assert_true(cnl_b64_encode(mac, maclen, CNL_B64_URL, out + pos,
	                           outlen - (size_t)pos) == 43);
}

#define HS256_HDR "{\"alg\":\"HS256\",\"typ\":\"JWT\"}"
#define GOOD_PAYLOAD                                                      \
	"{\"sub\":\"u_1\",\"aud\":\"cnlabd\",\"iat\":1700000000,\"exp\":" \
	"1700000600}"

static void fill_claims(struct cnl_auth_claims *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->sub, sizeof(c->sub), "usr_01HZX5");
	snprintf(c->aud, sizeof(c->aud), AUD);
	snprintf(c->iss, sizeof(c->iss), "https://cnlab.example");
	snprintf(c->proj, sizeof(c->proj), "prj_vision");
	snprintf(c->role, sizeof(c->role), "admin");
	c->iat = NOW;
	c->exp = NOW + 900;
}

/* Verify must refuse @tok and leave the claims it was given alone. */
static void assert_refused(const char *tok, const uint8_t *key)
{
	struct cnl_auth_claims r, before;
	int rc;

	memset(&r, 0xa5, sizeof(r));
	before = r;
	rc = cnl_auth_jwt_verify(tok, key, KEYLEN, AUD, NOW, &r);
	if (rc != -CNL_EAUTH)
		print_message("accepted or misjudged: %.300s\n", tok);
	assert_int_equal(rc, -CNL_EAUTH);
	assert_memory_equal(&r, &before, sizeof(r));
}

static void assert_forged_refused(const char *header, const char *payload)
{
	char tok[CNL_AUTH_JWT_MAX + 64];

	forge(header, payload, key1, KEYLEN, tok, sizeof(tok));
	assert_refused(tok, key1);
}

static void test_jwt_round_trip(void **state)
{
	struct cnl_auth_claims c, r;
	char tok[1024];
	int n;

	fill_claims(&c);
	n = cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok));
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(tok));
	memset(&r, 0, sizeof(r));
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW, &r),
	                 0);
	assert_string_equal(r.sub, c.sub);
	assert_string_equal(r.aud, c.aud);
	assert_string_equal(r.iss, c.iss);
	assert_string_equal(r.proj, c.proj);
	assert_string_equal(r.role, c.role);
	assert_int_equal(r.iat, c.iat);
	assert_int_equal(r.exp, c.exp);

	/* Optional claims left out come back empty. */
	c.proj[0] = c.role[0] = c.iss[0] = '\0';
	c.iat = 0;
	assert_true(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok)) > 0);
	memset(&r, 0x5a, sizeof(r));
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW, &r),
	                 0);
	assert_string_equal(r.proj, "");
	assert_string_equal(r.role, "");
	assert_string_equal(r.iss, "");
	assert_int_equal(r.iat, 0);

	/* The forging helper itself makes tokens verify accepts. */
	forge(HS256_HDR, GOOD_PAYLOAD, key1, KEYLEN, tok, sizeof(tok));
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW, &r),
	                 0);
	assert_string_equal(r.sub, "u_1");
	assert_int_equal(r.exp, NOW + 600);
}

static void test_jwt_sign_refuses_bad_input(void **state)
{
	struct cnl_auth_claims c;
	char tok[1024];

	fill_claims(&c);
	assert_int_equal(cnl_auth_jwt_sign(&c, key1, 0, tok, sizeof(tok)),
	                 -EINVAL);
	assert_int_equal(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, 20),
	                 -ENOBUFS);
	c.exp = c.iat;
	assert_int_equal(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok)),
	                 -EINVAL);
	fill_claims(&c);
	c.sub[0] = '\0';
	assert_int_equal(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok)),
	                 -EINVAL);
	fill_claims(&c);
	memset(c.role, 'r', sizeof(c.role)); /* not NUL-terminated */
	assert_int_equal(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok)),
	                 -EINVAL);
}

/* RFC 7515 Appendix A.1: encoding of its header and payload, signature. */
static void test_jwt_rfc7515_hs256_known_answer(void **state)
{
	static const char header[] = "{\"typ\":\"JWT\",\r\n \"alg\":\"HS256\"}";
	static const char payload[] =
	    "{\"iss\":\"joe\",\r\n \"exp\":1300819380,\r\n "
	    "\"http://example.com/is_root\":true}";
	static const char k[] = "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-"
	                        "1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow";
	static const char want_input[] =
	    "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9."
	    "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFt"
	    "cGxlLmNvbS9pc19yb290Ijp0cnVlfQ";
	static const char want_sig[] =
	    "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
	uint8_t key[64];
	char input[256], sig[64], tok[512];
	int klen, n;
	struct cnl_auth_claims r;

	klen = cnl_b64_decode(k, strlen(k), CNL_B64_URL, key, sizeof(key));
	assert_int_equal(klen, 64);

	n = cnl_b64_encode(header, strlen(header), CNL_B64_URL, input,
	                   sizeof(input));
	assert_true(n > 0);
	input[n++] = '.';
	assert_true(cnl_b64_encode(payload, strlen(payload), CNL_B64_URL,
	                           input + n, sizeof(input) - (size_t)n) > 0);
	assert_string_equal(input, want_input);

	assert_int_equal(cnl_auth_hs256(key, (size_t)klen, input, strlen(input),
	                                sig, sizeof(sig)),
	                 43);
	assert_string_equal(sig, want_sig);

	/*
	 * Our verify always demands aud and sub, which the example lacks, so
	 * the complete token is refused even before its exp of 2011.
	 */
	snprintf(tok, sizeof(tok), "%s.%s", want_input, want_sig);
	assert_int_equal(cnl_auth_jwt_verify(tok, key, (size_t)klen, AUD,
	                                     INT64_C(1300000000), &r),
	                 -CNL_EAUTH);
}

/* RFC 4231's HMAC-SHA-256 vectors 1, 2 and 6 (a key of 131 bytes,
 * longer than a block: hashed first), then OpenSSL's HMAC() beside ours for
 * every key length 1..200 (a block is 64) and messages of 0..300 bytes. */
static void test_hs256_rfc4231_and_openssl(void **state)
{
	static const struct {
		size_t klen;
		uint8_t kbyte; /* the key, klen of it; 0: kstr */
		const char *kstr, *msg, *hex;
	} v[] = {
	    {20, 0x0b, NULL, "Hi There",
	     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff"
	     "7"},
	    {4, 0, "Jefe", "what do ya want for nothing?",
	     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec384"
	     "3"},
	    {131, 0xaa, NULL,
	     "Test Using Larger Than Block-Size Key - Hash Key First",
	     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f5"
	     "4"},
	};
	uint8_t key[200], msg[300], want[32], got[40];
	char sig[64], hex[3];
	unsigned int wl;

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		if (v[i].kstr)
			memcpy(key, v[i].kstr, v[i].klen);
		else
			memset(key, v[i].kbyte, v[i].klen);
		assert_int_equal(cnl_auth_hs256(key, v[i].klen, v[i].msg,
		                                strlen(v[i].msg), sig,
		                                sizeof(sig)),
		                 43);
		assert_int_equal(
		    cnl_b64_decode(sig, 43, CNL_B64_URL, got, sizeof(got)), 32);
		for (size_t b = 0; b < 32; b++) {
			snprintf(hex, sizeof(hex), "%02x", got[b]);
			assert_memory_equal(hex, v[i].hex + 2 * b, 2);
		}
	}
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(i * 131 + 7);
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 17 + 3);
	for (size_t kl = 1; kl <= sizeof(key); kl++) {
		size_t ml = (kl * 37) % sizeof(msg);

		assert_non_null(
		    HMAC(EVP_sha256(), key, (int)kl, msg, ml, want, &wl));
		assert_int_equal(wl, 32);
		assert_int_equal(cnl_auth_hs256(key, kl, (const char *)msg, ml,
		                                sig, sizeof(sig)),
		                 43);
		assert_int_equal(
		    cnl_b64_decode(sig, 43, CNL_B64_URL, got, sizeof(got)), 32);
		assert_memory_equal(got, want, 32);
	}
}

static void test_jwt_refuses_bad_alg(void **state)
{
	char tok[1024];

	/* alg none with an empty signature, in several spellings */
	forge("{\"alg\":\"none\",\"typ\":\"JWT\"}", GOOD_PAYLOAD, NULL, 0, tok,
	      sizeof(tok));
	assert_refused(tok, key1);
	forge("{\"alg\":\"nOnE\"}", GOOD_PAYLOAD, NULL, 0, tok, sizeof(tok));
	assert_refused(tok, key1);
	forge("{\"alg\":\"NONE\"}", GOOD_PAYLOAD, NULL, 0, tok, sizeof(tok));
	assert_refused(tok, key1);

	/* alg none or other algorithms even with a valid HMAC signature */
	assert_forged_refused("{\"alg\":\"none\"}", GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"RS256\",\"typ\":\"JWT\"}",
	                      GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"HS512\"}", GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"hs256\"}", GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"HS256 \"}", GOOD_PAYLOAD);

	/* headers that are not JSON objects or lack a string alg */
	assert_forged_refused("not json", GOOD_PAYLOAD);
	assert_forged_refused("", GOOD_PAYLOAD);
	assert_forged_refused("[\"HS256\"]", GOOD_PAYLOAD);
	assert_forged_refused("\"HS256\"", GOOD_PAYLOAD);
	assert_forged_refused("{\"typ\":\"JWT\"}", GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":256}", GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":null}", GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"HS256\",\"alg\":\"none\"}",
	                      GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"HS256\",\"crit\":[\"exp\"]}",
	                      GOOD_PAYLOAD);
	assert_forged_refused("{\"alg\":\"HS256\"} trailing", GOOD_PAYLOAD);
}

static void test_jwt_refuses_bad_signature(void **state)
{
	static const char swapped[] = "{\"sub\":\"usr_01HZX5\",\"aud\":"
	                              "\"cnlabd\",\"exp\":1800000000,"
	                              "\"role\":\"root\"}";
	struct cnl_auth_claims c, r;
	char tok[1024], evil[1100], payload64[512];
	char *dot1, *dot2;
	size_t n;

	fill_claims(&c);
	assert_true(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok)) > 0);
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW, &r),
	                 0);

	/* signed with another key */
	assert_refused(tok, key2);

	/* payload swapped after signing: role raised, signature kept */
	dot1 = strchr(tok, '.');
	dot2 = strchr(dot1 + 1, '.');
	assert_true(cnl_b64_encode(swapped, strlen(swapped), CNL_B64_URL,
	                           payload64, sizeof(payload64)) > 0);
	snprintf(evil, sizeof(evil), "%.*s.%s%s", (int)(dot1 - tok), tok,
	         payload64, dot2);
	assert_refused(evil, key1);

	/* each single character of the signature changed */
	n = strlen(tok);
	for (size_t i = (size_t)(dot2 - tok) + 1; i < n; i++) {
		memcpy(evil, tok, n + 1);
		evil[i] = evil[i] == 'A' ? 'B' : 'A';
		assert_refused(evil, key1);
	}
	/* signature truncated, extended, or empty */
	memcpy(evil, tok, n + 1);
	evil[n - 1] = '\0';
	assert_refused(evil, key1);
	snprintf(evil, sizeof(evil), "%sAA", tok);
	assert_refused(evil, key1);
	snprintf(evil, sizeof(evil), "%.*s", (int)(dot2 - tok) + 1, tok);
	assert_refused(evil, key1);
}

static void test_jwt_refuses_bad_shape(void **state)
{
	struct cnl_auth_claims c, r;
	char tok[1024], evil[1100];
	static const char *const garbage[] = {
	    "",
	    ".",
	    "..",
	    "...",
	    "abc",
	    "a.b",
	    "a.b.c",
	    "a.b.c.d",
	    "eyJhbGciOiJIUzI1NiJ9",
	    "\x01\x02.\x03.\x04",
	};

	fill_claims(&c);
	assert_true(cnl_auth_jwt_sign(&c, key1, KEYLEN, tok, sizeof(tok)) > 0);
	snprintf(evil, sizeof(evil), "%s.%s", tok, "AAAA");
	assert_refused(evil, key1); /* four parts */
	snprintf(evil, sizeof(evil), "%s.", tok);
	assert_refused(evil, key1); /* four parts, the last empty */
	snprintf(evil, sizeof(evil), "%s=", tok);
	assert_refused(evil, key1); /* padding */
	snprintf(evil, sizeof(evil), " %s", tok);
	assert_refused(evil, key1);
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
		assert_refused(garbage[i], key1);

	assert_int_equal(cnl_auth_jwt_verify(NULL, key1, KEYLEN, AUD, NOW, &r),
	                 -EINVAL);
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, 0, AUD, NOW, &r),
	                 -EINVAL);
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, KEYLEN, "", NOW, &r),
	                 -EINVAL);
}

static void test_jwt_refuses_oversized(void **state)
{
	static char payload[CNL_AUTH_JWT_MAX], tok[CNL_AUTH_JWT_MAX + 512];
	struct cnl_auth_claims r;
	int pad;

	/* A valid token just under the limit passes; just over, refused. */
	for (pad = 5800; pad < 6300; pad += 50) {
		size_t len;
		int rc;

		snprintf(payload, sizeof(payload),
		         "{\"sub\":\"u\",\"aud\":\"cnlabd\",\"exp\":1800000000,"
		         "\"x\":\"%0*d\"}",
		         pad, 0);
		forge(HS256_HDR, payload, key1, KEYLEN, tok, sizeof(tok));
		len = strlen(tok);
		rc = cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW, &r);
		if (len <= CNL_AUTH_JWT_MAX)
			assert_int_equal(rc, 0);
		else
			assert_int_equal(rc, -CNL_EAUTH);
	}
	/* the loop crossed the limit */
	assert_true(strlen(tok) > CNL_AUTH_JWT_MAX);
}

static void test_jwt_refuses_bad_claims(void **state)
{
	char p[512];

	/* expiry: exp == now is expired; missing, wrong types refused */
	snprintf(p, sizeof(p),
	         "{\"sub\":\"u\",\"aud\":\"cnlabd\",\"exp\":%lld}",
	         (long long)NOW);
	assert_forged_refused(HS256_HDR, p);
	snprintf(p, sizeof(p),
	         "{\"sub\":\"u\",\"aud\":\"cnlabd\",\"exp\":%lld}",
	         (long long)NOW - 1);
	assert_forged_refused(HS256_HDR, p);
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\"}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":\"1800000000\"}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000.5}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":null}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000,\"exp\":1}");

	/* iat or nbf more than 60 s ahead */
	snprintf(p, sizeof(p),
	         "{\"sub\":\"u\",\"aud\":\"cnlabd\",\"exp\":1800000000,"
	         "\"iat\":%lld}",
	         (long long)NOW + 61);
	assert_forged_refused(HS256_HDR, p);
	snprintf(p, sizeof(p),
	         "{\"sub\":\"u\",\"aud\":\"cnlabd\",\"exp\":1800000000,"
	         "\"nbf\":%lld}",
	         (long long)NOW + 61);
	assert_forged_refused(HS256_HDR, p);
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000,\"iat\":\"0\"}");

	/* audience wrong, missing, wrongly typed */
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"other\","
	                                 "\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd2\","
	                                 "\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":[\"other\"],"
	                                 "\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":[],"
	                                 "\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":[\"cnlabd\","
	                                 "7],\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":null,"
	                                 "\"exp\":1800000000}");

	/* subject and string claims */
	assert_forged_refused(HS256_HDR,
	                      "{\"aud\":\"cnlabd\",\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":42,\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000,\"role\":1}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000,\"proj\":[]}");
	assert_forged_refused(HS256_HDR, "{\"sub\":\"u\",\"aud\":\"cnlabd\","
	                                 "\"exp\":1800000000,\"iss\":{}}");
	snprintf(p, sizeof(p),
	         "{\"sub\":\"u\",\"aud\":\"cnlabd\",\"exp\":1800000000,"
	         "\"role\":\"%0*d\"}",
	         CNL_AUTH_CLAIM_MAX, 0);
	assert_forged_refused(HS256_HDR, p);

	/* payload that is not a JSON object */
	assert_forged_refused(HS256_HDR, "[1800000000]");
	assert_forged_refused(HS256_HDR, "not json");
}

static void test_jwt_accepts_edges(void **state)
{
	struct cnl_auth_claims r;
	char p[512], tok[1024];

	/* exp one second ahead, iat exactly 60 s ahead, aud in an array */
	snprintf(p, sizeof(p),
	         "{\"sub\":\"u\",\"aud\":[\"x\",\"cnlabd\"],\"exp\":%lld,"
	         "\"iat\":%lld,\"nbf\":%lld,\"extra\":{\"a\":[1]}}",
	         (long long)NOW + 1, (long long)NOW + 60, (long long)NOW);
	forge(HS256_HDR, p, key1, KEYLEN, tok, sizeof(tok));
	assert_int_equal(cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW, &r),
	                 0);
	assert_string_equal(r.aud, AUD);
	assert_int_equal(r.exp, NOW + 1);
	assert_int_equal(r.iat, NOW + 60);
	/* one second later it has expired */
	assert_int_equal(
	    cnl_auth_jwt_verify(tok, key1, KEYLEN, AUD, NOW + 1, &r),
	    -CNL_EAUTH);
}

/* ------------------------------------------------------------------------ */
/* API tokens                                                               */
/* ------------------------------------------------------------------------ */

static void test_token_format(void **state)
{
	char a[CNL_AUTH_TOKEN_MAX], b[CNL_AUTH_TOKEN_MAX];
	char da[CNL_AUTH_DIGEST_MAX], db[CNL_AUTH_DIGEST_MAX];
	uint8_t raw[40];

	assert_int_equal(cnl_auth_token_new(a, sizeof(a)), 0);
	assert_int_equal(cnl_auth_token_new(b, sizeof(b)), 0);
	assert_int_equal(strlen(a), CNL_AUTH_TOKEN_LEN);
	assert_int_equal(strncmp(a, "cnl_", 4), 0);
	assert_int_equal(
	    cnl_b64_decode(a + 4, 43, CNL_B64_URL, raw, sizeof(raw)), 32);
	assert_string_not_equal(a, b);
	assert_int_equal(cnl_auth_token_check(a), 0);
	assert_int_equal(cnl_auth_token_new(b, CNL_AUTH_TOKEN_MAX - 1),
	                 -ENOBUFS);

	assert_int_equal(cnl_auth_token_digest(a, da), 0);
	assert_int_equal(cnl_auth_token_digest(a, db), 0);
	assert_string_equal(da, db);
	assert_int_equal(strlen(da), 64);
	assert_int_equal(strspn(da, "0123456789abcdef"), 64);

	/* malformed tokens */
	memcpy(b, a, sizeof(b));
	b[0] = 'C';
	assert_int_equal(cnl_auth_token_check(b), -CNL_EPARSE);
	memcpy(b, a, sizeof(b));
	b[10] = '+';
	assert_int_equal(cnl_auth_token_check(b), -CNL_EPARSE);
	memcpy(b, a, sizeof(b));
	b[CNL_AUTH_TOKEN_LEN - 1] = '\0';
	assert_int_equal(cnl_auth_token_check(b), -CNL_EPARSE);
	assert_int_equal(cnl_auth_token_check(""), -CNL_EPARSE);
	/* "cnl_" + 43 'A' is well formed; one character more or less is not */
	memcpy(b, "cnl_", 4);
	memset(b + 4, 'A', 43);
	b[47] = '\0';
	assert_int_equal(cnl_auth_token_check(b), 0);
	b[46] = '\0';
	assert_int_equal(cnl_auth_token_check(b), -CNL_EPARSE);
	b[46] = 'A';
	b[47] = 'A';
	assert_int_equal(cnl_auth_token_check(b),
	                 -CNL_EPARSE); /* unterminated */
	/* 43 characters whose last has unused bits set: not canonical */
	b[46] = 'B';
	b[47] = '\0';
	assert_int_equal(cnl_auth_token_check(b), -CNL_EPARSE);
}

static void test_token_digest_known_answer(void **state)
{
	char d[CNL_AUTH_DIGEST_MAX];

	assert_int_equal(cnl_auth_token_digest("abc", d), 0);
	assert_string_equal(d, "ba7816bf8f01cfea414140de5dae2223"
	                       "b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(cnl_auth_token_digest("", d), 0);
	assert_string_equal(d, "e3b0c44298fc1c149afbf4c8996fb924"
	                       "27ae41e4649b934ca495991b7852b855");
}

/* A collector's token: good for its job and epoch under its secret only. */
static void test_collect_token(void **state)
{
	(void)state;
	static const uint8_t k1[] = "a secret of cnlabd, 32 bytes long!";
	static const uint8_t k2[] = "another secret of cnlabd, 32 bytes";
	char t[CNL_AUTH_COLLECT_MAX], t2[CNL_AUTH_COLLECT_MAX];

	assert_int_equal(
	    cnl_auth_collect_token(k1, sizeof(k1) - 1, "job_A", 3, t), 0);
	assert_int_equal(strlen(t), CNL_AUTH_COLLECT_MAX - 1);
	assert_memory_equal(t, "cnlc_", 5);
	assert_int_equal(strspn(t + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"
	                               "klmnopqrstuvwxyz0123456789-_"),
	                 43);
	assert_true(cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 3, t));
	/* The same inputs, the same token: nothing stored. */
	assert_int_equal(
	    cnl_auth_collect_token(k1, sizeof(k1) - 1, "job_A", 3, t2), 0);
	assert_string_equal(t, t2);
	/* Another epoch, job or secret: refused. */
	assert_false(cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 4, t));
	assert_false(cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_B", 3, t));
	assert_false(cnl_auth_collect_check(k2, sizeof(k2) - 1, "job_A", 3, t));
	/* "job_A\n3" must not be "job_A" and "\n3" of another split. */
	assert_int_equal(
	    cnl_auth_collect_token(k1, sizeof(k1) - 1, "job_A3", 0, t2), 0);
	assert_string_not_equal(t, t2);
	/* A cut, a longer or a changed token: refused. */
	t2[0] = '\0';
	snprintf(t2, sizeof(t2), "%.*s", CNL_AUTH_COLLECT_MAX - 2, t);
	assert_false(
	    cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 3, t2));
	char longer[CNL_AUTH_COLLECT_MAX + 1];
	snprintf(longer, sizeof(longer), "%sA", t);
	assert_false(
	    cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 3, longer));
	t[10] = t[10] == 'A' ? 'B' : 'A';
	assert_false(cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 3, t));
	assert_false(
	    cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 3, ""));
	assert_false(
	    cnl_auth_collect_check(k1, sizeof(k1) - 1, "job_A", 3, NULL));
	/* No secret, no job, a negative epoch: no token. */
	assert_int_equal(cnl_auth_collect_token(k1, 0, "job_A", 3, t), -EINVAL);
	assert_int_equal(cnl_auth_collect_token(k1, sizeof(k1) - 1, NULL, 3, t),
	                 -EINVAL);
	assert_int_equal(
	    cnl_auth_collect_token(k1, sizeof(k1) - 1, "job_A", -1, t),
	    -EINVAL);
	assert_string_equal(t, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_password_round_trip_default_cost),
	    cmocka_unit_test(test_password_wrong_and_salted),
	    cmocka_unit_test(test_password_decoy),
	    cmocka_unit_test(test_password_rfc7914_known_answer),
	    cmocka_unit_test(test_password_malformed),
	    cmocka_unit_test(test_password_length_limits),
	    cmocka_unit_test(test_jwt_round_trip),
	    cmocka_unit_test(test_jwt_sign_refuses_bad_input),
	    cmocka_unit_test(test_jwt_rfc7515_hs256_known_answer),
	    cmocka_unit_test(test_hs256_rfc4231_and_openssl),
	    cmocka_unit_test(test_jwt_refuses_bad_alg),
	    cmocka_unit_test(test_jwt_refuses_bad_signature),
	    cmocka_unit_test(test_jwt_refuses_bad_shape),
	    cmocka_unit_test(test_jwt_refuses_oversized),
	    cmocka_unit_test(test_jwt_refuses_bad_claims),
	    cmocka_unit_test(test_jwt_accepts_edges),
	    cmocka_unit_test(test_token_format),
	    cmocka_unit_test(test_token_digest_known_answer),
	    cmocka_unit_test(test_collect_token),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
