/*
 * test_oidc.c - OIDC ID token verification with real crypto: RSA keys are
 * generated here with OpenSSL, published as JWKS files or served over HTTP
 * by a libmicrohttpd server on 127.0.0.1, and tokens are signed here with
 * EVP_DigestSign.  Covered: the good path, every refusal (alg none, the
 * HS256-with-the-public-key confusion, unknown kid, foreign key, each
 * claim), JWKS errors named in the message, reload all-or-nothing, fetch
 * over a URL with kid-driven refetch and its pacing, fetch failures, and
 * concurrent verification during reloads.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>
#include <microhttpd.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "server/auth.h"
#include "server/oidc.h"

#define NOW INT64_C(1700000000)
#define ISS "https://idp.example.org"
#define AUD "cnlab"

/* ------------------------------------------------------------------------ */
/* Keys, JWKS and tokens                                                    */
/* ------------------------------------------------------------------------ */

static struct {
	char dir[64];
	char jwks[128];  /* k1, k2 and non-RSA keys */
	char one[128];   /* k1 only */
	char other[128]; /* scratch */
	EVP_PKEY *k1, *k2, *k3, *small;
	struct cnl_oidc *o; /* over F.jwks */
} F;

static char *b64(const void *p, size_t n)
{
	size_t cap = (4 * n + 2) / 3 + 1;
	char *s = malloc(cap);

	assert_non_null(s);
	assert_true(cnl_b64_encode(p, n, CNL_B64_URL, s, cap) >= 0);
	return s;
}

static char *b64_bn(EVP_PKEY *k, const char *name)
{
	BIGNUM *bn = NULL;
	uint8_t buf[1024];
	int n;
	char *s;

	assert_int_equal(EVP_PKEY_get_bn_param(k, name, &bn), 1);
	n = BN_bn2bin(bn, buf);
	assert_true(n > 0);
	s = b64(buf, (size_t)n);
	BN_free(bn);
	return s;
}

/* The public JWK of @k under @kid (NULL: no kid). */
static json_t *jwk(EVP_PKEY *k, const char *kid)
{
	char *n = b64_bn(k, OSSL_PKEY_PARAM_RSA_N);
	char *e = b64_bn(k, OSSL_PKEY_PARAM_RSA_E);
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s}", "kty", "RSA", "use",
	                      "sig", "alg", "RS256", "n", n, "e", e);

	assert_non_null(j);
	if (kid)
		json_object_set_new(j, "kid", json_string(kid));
	free(n);
	free(e);
	return j;
}

/* {"keys": @keys}, @keys stolen, as text to free(). */
static char *jwks_text(json_t *keys)
{
	json_t *root = json_pack("{s:o}", "keys", keys);
	char *s;

	assert_non_null(root);
	s = json_dumps(root, JSON_COMPACT);
	assert_non_null(s);
	json_decref(root);
	return s;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void write_jwks(const char *path, json_t *keys)
{
	char *s = jwks_text(keys);

	write_file(path, s);
	free(s);
}

/* Any of: header and payload text with a given signature. */
static char *tok_raw(const char *hdr, const char *payload, const char *sig)
{
	char *h = b64(hdr, strlen(hdr)), *p = b64(payload, strlen(payload));
	size_t n = strlen(h) + strlen(p) + strlen(sig) + 3;
	char *t = malloc(n);

	assert_non_null(t);
	snprintf(t, n, "%s.%s.%s", h, p, sig);
	free(h);
	free(p);
	return t;
}

/* RS256 signature of "@h.@p" (base64url parts) under @k. */
static char *rs256(EVP_PKEY *k, const char *input)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	uint8_t sig[1024];
	size_t siglen = sizeof(sig);

	assert_non_null(md);
	assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k),
	                 1);
	assert_int_equal(EVP_DigestSign(md, sig, &siglen,
	                                (const uint8_t *)input, strlen(input)),
	                 1);
	EVP_MD_CTX_free(md);
	return b64(sig, siglen);
}

/* A token of header @hdr and payload @payload signed with RS256 by @k. */
static char *tok_signed(const char *hdr, const char *payload, EVP_PKEY *k)
{
	char *unsigned_tok = tok_raw(hdr, payload, "");
	char *sig, *t;
	size_t n;

	unsigned_tok[strlen(unsigned_tok) - 1] = '\0'; /* drop the last '.' */
	sig = rs256(k, unsigned_tok);
	n = strlen(unsigned_tok) + strlen(sig) + 2;
	t = malloc(n);
	assert_non_null(t);
	snprintf(t, n, "%s.%s", unsigned_tok, sig);
	free(unsigned_tok);
	free(sig);
	return t;
}

/* The claims of a good token for alice. */
static json_t *claims(void)
{
	json_t *c =
	    json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I}", "iss", ISS, "aud", AUD,
	              "sub", "idp|12345", "preferred_username", "alice",
	              "email", "alice@example.org", "iat", (json_int_t)NOW,
	              "exp", (json_int_t)(NOW + 600));

	assert_non_null(c);
	return c;
}

/* A token with claims @c (stolen) and kid @kid (NULL: none), signed by @k. */
static char *tok(json_t *c, const char *kid, EVP_PKEY *k)
{
	json_t *h = json_pack("{s:s,s:s}", "alg", "RS256", "typ", "JWT");
	char *hs, *cs, *t;

	if (kid)
		json_object_set_new(h, "kid", json_string(kid));
	hs = json_dumps(h, JSON_COMPACT);
	cs = json_dumps(c, JSON_COMPACT);
	assert_non_null(hs);
	assert_non_null(cs);
	t = tok_signed(hs, cs, k);
	free(hs);
	free(cs);
	json_decref(h);
	json_decref(c);
	return t;
}

/* A good token with claim @name replaced by @v (stolen; NULL: deleted). */
static char *tok_with(const char *name, json_t *v)
{
	json_t *c = claims();

	if (v)
		json_object_set_new(c, name, v);
	else
		json_object_del(c, name);
	return tok(c, "k1", F.k1);
}

/* Verify @t (freed) against @o at @now: refused, @why in err, ret intact. */
static void refused_at(struct cnl_oidc *o, char *t, int64_t now,
                       const char *why)
{
	struct cnl_oidc_identity id, before;
	char err[512] = "";

	memset(&id, 0x5a, sizeof(id));
	before = id;
	assert_int_equal(cnl_oidc_verify(o, t, now, &id, err, sizeof(err)),
	                 -CNL_EAUTH);
	if (!strstr(err, why))
		fail_msg("err \"%s\" lacks \"%s\"", err, why);
	assert_memory_equal(&id, &before, sizeof(id));
	free(t);
}

static void refused(char *t, const char *why)
{
	refused_at(F.o, t, NOW, why);
}

/* Verify @t (freed) against @o at @now: accepted, username @user. */
static void accepted_at(struct cnl_oidc *o, char *t, int64_t now,
                        const char *user)
{
	struct cnl_oidc_identity id;
	char err[512] = "";
	int rc = cnl_oidc_verify(o, t, now, &id, err, sizeof(err));

	if (rc != 0)
		fail_msg("refused (%d): %s", rc, err);
	assert_string_equal(id.username, user);
	free(t);
}

static void accepted(char *t)
{
	accepted_at(F.o, t, NOW, "alice");
}

static struct cnl_oidc *new_file(const char *path)
{
	struct cnl_oidc_config cfg = {
	    .issuer = ISS, .audience = AUD, .jwks_file = path};
	struct cnl_oidc *o = NULL;
	char err[512] = "";

	if (cnl_oidc_new(&cfg, &o, err, sizeof(err)) != 0)
		fail_msg("cnl_oidc_new: %s", err);
	return o;
}

/* ------------------------------------------------------------------------ */
/* HTTP server serving a JWKS                                               */
/* ------------------------------------------------------------------------ */

static struct {
	struct MHD_Daemon *d;
	pthread_mutex_t mu;
	char *body;
	unsigned status;
	int hits;
	char url[64];
} S;

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn,
                             const char *url, const char *method,
                             const char *version, const char *upload,
                             size_t *upload_size, void **con_cls)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)cls;
	(void)url;
	(void)method;
	(void)version;
	(void)upload;
	(void)upload_size;
	(void)con_cls;
	pthread_mutex_lock(&S.mu);
	S.hits++;
	r = MHD_create_response_from_buffer(strlen(S.body), S.body,
	                                    MHD_RESPMEM_MUST_COPY);
	ret = MHD_queue_response(conn, S.status, r);
	pthread_mutex_unlock(&S.mu);
	MHD_destroy_response(r);
	return ret;
}

/* What the server answers from now on; @body is taken over. */
static void serve_set(unsigned status, char *body)
{
	pthread_mutex_lock(&S.mu);
	free(S.body);
	S.body = body;
	S.status = status;
	pthread_mutex_unlock(&S.mu);
}

static int hits(void)
{
	int n;

	pthread_mutex_lock(&S.mu);
	n = S.hits;
	pthread_mutex_unlock(&S.mu);
	return n;
}

static void server_start(void)
{
	struct sockaddr_in sa = {0};
	const union MHD_DaemonInfo *info;

	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	pthread_mutex_init(&S.mu, NULL);
	S.body = strdup("{}");
	S.status = 200;
	S.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO,
	                       0, NULL, NULL, serve, NULL, MHD_OPTION_SOCK_ADDR,
	                       &sa, MHD_OPTION_END);
	assert_non_null(S.d);
	info = MHD_get_daemon_info(S.d, MHD_DAEMON_INFO_BIND_PORT);
	assert_non_null(info);
	snprintf(S.url, sizeof(S.url), "http://127.0.0.1:%u/jwks.json",
	         (unsigned)info->port);
}

static void server_stop(void)
{
	MHD_stop_daemon(S.d);
	free(S.body);
	pthread_mutex_destroy(&S.mu);
}

static int new_url(const char *url, struct cnl_oidc **ret, char *err,
                   size_t errlen)
{
	struct cnl_oidc_config cfg = {
	    .issuer = ISS, .audience = AUD, .jwks_url = url};

	return cnl_oidc_new(&cfg, ret, err, errlen);
}

/* ------------------------------------------------------------------------ */
/* Setup                                                                    */
/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
	json_t *keys;

	(void)state;
	F.k1 = EVP_RSA_gen(2048);
	F.k2 = EVP_RSA_gen(2048);
	F.k3 = EVP_RSA_gen(2048);
	F.small = EVP_RSA_gen(1024);
	if (!F.k1 || !F.k2 || !F.k3 || !F.small)
		return -1;
	snprintf(F.dir, sizeof(F.dir), "/tmp/cnl-oidc-XXXXXX");
	if (!mkdtemp(F.dir))
		return -1;
	snprintf(F.jwks, sizeof(F.jwks), "%s/jwks.json", F.dir);
	snprintf(F.one, sizeof(F.one), "%s/one.json", F.dir);
	snprintf(F.other, sizeof(F.other), "%s/other.json", F.dir);

	/* Providers publish EC and encryption keys too; they are skipped. */
	keys = json_pack("[o,o,{s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s}]",
	                 jwk(F.k1, "k1"), jwk(F.k2, "k2"), "kty", "EC", "crv",
	                 "P-256", "kid", "ec1", "x", "AAAA", "y", "AAAA", "kty",
	                 "oct", "kid", "sym", "k", "c2VjcmV0");
	json_array_append_new(keys, jwk(F.k3, "enc1"));
	json_object_set_new(json_array_get(keys, 4), "use", json_string("enc"));
	write_jwks(F.jwks, keys);
	write_jwks(F.one, json_pack("[o]", jwk(F.k1, "k1")));
	F.o = new_file(F.jwks);
	server_start();
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	server_stop();
	cnl_oidc_free(F.o);
	unlink(F.jwks);
	unlink(F.one);
	unlink(F.other);
	rmdir(F.dir);
	EVP_PKEY_free(F.k1);
	EVP_PKEY_free(F.k2);
	EVP_PKEY_free(F.k3);
	EVP_PKEY_free(F.small);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Good tokens                                                              */
/* ------------------------------------------------------------------------ */

static void test_good_token(void **state)
{
	struct cnl_oidc_identity id;
	char err[256] = "", *t;

	(void)state;
	t = tok(claims(), "k1", F.k1);
	assert_int_equal(cnl_oidc_verify(F.o, t, NOW, &id, err, sizeof(err)),
	                 0);
	assert_string_equal(id.username, "alice");
	assert_string_equal(id.sub, "idp|12345");
	assert_string_equal(id.iss, ISS);
	assert_string_equal(id.email, "alice@example.org");
	assert_int_equal(id.exp, NOW + 600);
	free(t);

	/* The second key of the set works as well. */
	accepted(tok(claims(), "k2", F.k2));
	/* "aud" as an array containing us; "nbf" in the past; no email. */
	accepted(tok_with("aud", json_pack("[s,s]", "other", AUD)));
	accepted(tok_with("nbf", json_integer(NOW - 10)));
	t = tok_with("email", NULL);
	assert_int_equal(cnl_oidc_verify(F.o, t, NOW, &id, err, sizeof(err)),
	                 0);
	assert_string_equal(id.email, "");
	free(t);
	/* Names at the edge of the rule. */
	accepted_at(
	    F.o,
	    tok_with("preferred_username", json_string("a.B_9-" /* mixed */)),
	    NOW, "a.B_9-");
	{
		char n63[64];

		memset(n63, 'x', 63);
		n63[63] = '\0';
		accepted_at(F.o,
		            tok_with("preferred_username", json_string(n63)),
		            NOW, n63);
	}
}

static void test_clock_skew(void **state)
{
	(void)state;
	/* exp gets CNL_AUTH_JWT_SKEW_S of leeway, and no more. */
	accepted(tok_with("exp", json_integer(NOW - CNL_AUTH_JWT_SKEW_S + 1)));
	refused(tok_with("exp", json_integer(NOW - CNL_AUTH_JWT_SKEW_S)),
	        "expired");
	refused(tok_with("exp", json_integer(NOW - 3600)), "expired");
	/* iat and nbf may lie up to the skew ahead, not further. */
	accepted(tok_with("iat", json_integer(NOW + CNL_AUTH_JWT_SKEW_S)));
	refused(tok_with("iat", json_integer(NOW + CNL_AUTH_JWT_SKEW_S + 1)),
	        "\"iat\" is in the future");
	accepted(tok_with("nbf", json_integer(NOW + CNL_AUTH_JWT_SKEW_S)));
	refused(tok_with("nbf", json_integer(NOW + CNL_AUTH_JWT_SKEW_S + 1)),
	        "\"nbf\"");
	/* Far-off values do not overflow into acceptance. */
	refused(tok_with("exp", json_integer(INT64_MIN)), "expired");
	refused(tok_with("iat", json_integer(INT64_MAX)), "\"iat\"");
	refused_at(F.o, tok(claims(), "k1", F.k1), INT64_MAX, "expired");
}

static void test_single_key_without_kid(void **state)
{
	struct cnl_oidc *one = new_file(F.one);

	(void)state;
	/* One key: a token without kid may use it. */
	accepted_at(one, tok(claims(), NULL, F.k1), NOW, "alice");
	accepted_at(one, tok(claims(), "k1", F.k1), NOW, "alice");
	/* ... but it must still be that key's signature. */
	refused_at(one, tok(claims(), NULL, F.k2), NOW, "signature");
	/* Several keys: a token without kid is refused. */
	refused(tok(claims(), NULL, F.k1), "several keys");
	cnl_oidc_free(one);
}

static void test_username_claim_config(void **state)
{
	struct cnl_oidc_config cfg = {.issuer = ISS,
	                              .audience = AUD,
	                              .jwks_file = F.jwks,
	                              .username_claim = "cnlab_user"};
	struct cnl_oidc *o = NULL;
	char err[256];
	json_t *c;

	(void)state;
	assert_int_equal(cnl_oidc_new(&cfg, &o, err, sizeof(err)), 0);
	c = claims();
	json_object_set_new(c, "cnlab_user", json_string("bob"));
	accepted_at(o, tok(c, "k1", F.k1), NOW, "bob");
	/* Without the configured claim the token still verifies (the
	 * identity is iss and sub): there is just no name hint. */
	accepted_at(o, tok(claims(), "k1", F.k1), NOW, "");
	cnl_oidc_free(o);
}

/* ------------------------------------------------------------------------ */
/* Refusals                                                                 */
/* ------------------------------------------------------------------------ */

static void test_alg_refused(void **state)
{
	static const char payload_fmt[] =
	    "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"s\","
	    "\"preferred_username\":\"alice\",\"iat\":%lld,\"exp\":%lld}";
	char payload[512], *t, *pem = NULL, *input, sig[64];
	BIO *bio;
	long pemlen;

	(void)state;
	snprintf(payload, sizeof(payload), payload_fmt, (long long)NOW,
	         (long long)NOW + 600);

	/* "none", unsigned or with a real RS256 signature. */
	refused(tok_raw("{\"alg\":\"none\",\"kid\":\"k1\"}", payload, ""),
	        "not RS256");
	refused(tok_signed("{\"alg\":\"none\",\"kid\":\"k1\"}", payload, F.k1),
	        "not RS256");
	refused(tok_signed("{\"alg\":\"NONE\",\"kid\":\"k1\"}", payload, F.k1),
	        "not RS256");
	/* Other algorithms and spellings, each with a valid RSA signature. */
	refused(tok_signed("{\"alg\":\"RS512\",\"kid\":\"k1\"}", payload, F.k1),
	        "not RS256");
	refused(tok_signed("{\"alg\":\"rs256\",\"kid\":\"k1\"}", payload, F.k1),
	        "not RS256");
	refused(tok_signed("{\"kid\":\"k1\"}", payload, F.k1), "no \"alg\"");
	refused(tok_signed("{\"alg\":256,\"kid\":\"k1\"}", payload, F.k1),
	        "no \"alg\"");
	refused(
	    tok_signed("{\"alg\":\"RS256\",\"kid\":\"k1\",\"crit\":[\"b64\"]"
	               "}",
	               payload, F.k1),
	    "crit");
	refused(tok_signed("{\"alg\":\"RS256\",\"kid\":\"k1\",\"typ\":1}",
	                   payload, F.k1),
	        "typ");
	refused(tok_signed("{\"alg\":\"RS256\",\"kid\":7}", payload, F.k1),
	        "kid");

	/*
	 * Key confusion: HS256 keyed with k1's public key as published (PEM),
	 * the bytes a naive verifier would feed HMAC.  The MAC is right; the
	 * algorithm is not ours to choose.
	 */
	bio = BIO_new(BIO_s_mem());
	assert_non_null(bio);
	assert_int_equal(PEM_write_bio_PUBKEY(bio, F.k1), 1);
	pemlen = BIO_get_mem_data(bio, &pem);
	assert_true(pemlen > 0);
	t = tok_raw("{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"k1\"}",
	            payload, "");
	t[strlen(t) - 1] = '\0';
	assert_int_equal(cnl_auth_hs256((const uint8_t *)pem, (size_t)pemlen, t,
	                                strlen(t), sig, sizeof(sig)),
	                 43);
	BIO_free(bio);
	{
		size_t n = strlen(t) + strlen(sig) + 2;

		input = malloc(n);
		assert_non_null(input);
		snprintf(input, n, "%s.%s", t, sig);
	}
	free(t);
	assert_false(cnl_oidc_looks_like(input));
	refused(input, "alg \"HS256\" is not RS256");
}

static void test_kid_and_signature_refused(void **state)
{
	char *t;
	size_t n;

	(void)state;
	/* Unknown kid; a file source is not re-read for it. */
	refused(tok(claims(), "k9", F.k1), "kid \"k9\" unknown");
	/* Keys the set skips cannot be named. */
	refused(tok(claims(), "enc1", F.k3), "unknown");
	refused(tok(claims(), "sym", F.k1), "unknown");
	/* A key not in the set, claiming to be k1. */
	refused(tok(claims(), "k1", F.k3), "signature does not verify");
	/* k2's signature under k1's kid. */
	refused(tok(claims(), "k1", F.k2), "signature does not verify");

	/* A payload changed after signing. */
	t = tok(claims(), "k1", F.k1);
	{
		char *d1 = strchr(t, '.'), *p = d1 + 5;

		*p = *p == 'A' ? 'B' : 'A';
	}
	refused(t, "signature does not verify");

	/* A signature cut short, or with one byte too many. */
	t = tok(claims(), "k1", F.k1);
	n = strlen(t);
	t[n - 4] = '\0';
	refused(t, "signature");
	t = tok(claims(), "k1", F.k1);
	{
		char *u = malloc(strlen(t) + 8);

		assert_non_null(u);
		snprintf(u, strlen(t) + 8, "%sAAAA", t);
		free(t);
		refused(u, "signature");
	}
	/* No signature at all with a good alg. */
	t = tok(claims(), "k1", F.k1);
	*(strrchr(t, '.') + 1) = '\0';
	refused(t, "signature");
}

static void test_claims_refused(void **state)
{
	char n64[65];

	(void)state;
	refused(tok_with("iss", json_string("https://evil.example.org")),
	        "\"iss\"");
	refused(tok_with("iss", json_string(ISS "/")), "\"iss\"");
	refused(tok_with("iss", NULL), "\"iss\"");
	refused(tok_with("aud", json_string("other")), "\"aud\"");
	refused(tok_with("aud", json_pack("[s,s]", "a", "b")), "\"aud\"");
	refused(tok_with("aud", json_pack("[s,i]", AUD, 1)), "\"aud\"");
	refused(tok_with("aud", NULL), "\"aud\"");
	refused(tok_with("exp", NULL), "\"exp\"");
	refused(tok_with("exp", json_real((double)NOW + 600.5)), "\"exp\"");
	refused(tok_with("exp", json_string("1800000000")), "\"exp\"");
	refused(tok_with("iat", NULL), "\"iat\"");
	refused(tok_with("nbf", json_real((double)NOW)), "\"nbf\"");
	refused(tok_with("sub", NULL), "\"sub\"");
	refused(tok_with("sub", json_string("")), "\"sub\"");
	refused(tok_with("email", json_integer(1)), "\"email\"");

	/* The user name is a hint, not the identity: a missing or invalid
	 * one verifies with an empty name (the server then derives one). */
	accepted_at(F.o, tok_with("preferred_username", NULL), NOW, "");
	accepted_at(F.o, tok_with("preferred_username", json_integer(5)), NOW,
	            "");
	memset(n64, 'x', 64);
	n64[64] = '\0';
	const char *const bad[] = {
	    "",
	    ".hidden",
	    "-dash",
	    "a b",
	    "a/b",
	    "ali\xc3\xa7"
	    "e",
	    "a:b",
	    n64,
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		accepted_at(F.o,
		            tok_with("preferred_username", json_string(bad[i])),
		            NOW, "");
	/* jansson refuses \u0000 in input, so a NUL never reaches a name. */
	refused(tok_with("preferred_username", json_stringn("al\0ice", 6)),
	        "payload");
}

static void test_malformed_refused(void **state)
{
	char *t, *big;
	json_t *c;

	(void)state;
	refused(strdup(""), "three");
	refused(strdup("abc"), "three");
	refused(strdup("a.b"), "three");
	refused(strdup("a.b.c.d"), "three");
	refused(strdup("..."), "three");
	refused(strdup("!!!.e30.AAAA"), "header");
	/* Padding is not base64url. */
	t = tok(claims(), "k1", F.k1);
	{
		size_t n = strlen(t) + 2;
		char *u = malloc(n);

		assert_non_null(u);
		snprintf(u, n, "%s=", t);
		free(t);
		refused(u, "signature");
	}
	/* Header or payload that are not JSON objects, or repeat a key. */
	refused(tok_signed("[1]", "{}", F.k1), "header");
	refused(tok_signed("{\"alg\":\"RS256\",\"alg\":\"RS256\",\"kid\":"
	                   "\"k1\"}",
	                   "{}", F.k1),
	        "header");
	refused(
	    tok_signed("{\"alg\":\"RS256\",\"kid\":\"k1\"}", "not json", F.k1),
	    "payload");
	refused(tok_signed("{\"alg\":\"RS256\",\"kid\":\"k1\"}", "[]", F.k1),
	        "payload");
	refused(tok_signed("{\"alg\":\"RS256\",\"kid\":\"k1\"}",
	                   "{\"sub\":\"a\",\"sub\":\"b\"}", F.k1),
	        "payload");

	/* Oversized: a validly signed token padded past the limit. */
	c = claims();
	big = malloc(CNL_AUTH_JWT_MAX);
	assert_non_null(big);
	memset(big, 'x', CNL_AUTH_JWT_MAX - 1);
	big[CNL_AUTH_JWT_MAX - 1] = '\0';
	json_object_set_new(c, "junk", json_string(big));
	free(big);
	t = tok(c, "k1", F.k1);
	assert_true(strlen(t) > CNL_AUTH_JWT_MAX);
	refused(t, "longer than");
}

static void test_null_args(void **state)
{
	struct cnl_oidc_identity id;
	char err[128];

	(void)state;
	assert_int_equal(
	    cnl_oidc_verify(NULL, "a.b.c", NOW, &id, err, sizeof(err)),
	    -EINVAL);
	assert_int_equal(cnl_oidc_verify(F.o, NULL, NOW, &id, err, sizeof(err)),
	                 -EINVAL);
	assert_int_equal(cnl_oidc_verify(F.o, "a.b.c", NOW, NULL, NULL, 0),
	                 -EINVAL);
	assert_int_equal(cnl_oidc_reload(NULL, NULL, 0), -EINVAL);
	cnl_oidc_free(NULL);
}

static void test_looks_like(void **state)
{
	struct cnl_auth_claims c = {.sub = "u1", .aud = AUD, .exp = NOW + 60};
	static const uint8_t key[] = "a secret of thirty-two bytes!!!!";
	char hs[1024], *t;

	(void)state;
	t = tok(claims(), "k1", F.k1);
	assert_true(cnl_oidc_looks_like(t));
	free(t);
	/* No signature check: routing only. */
	t = tok_raw("{\"alg\":\"RS256\"}", "{}", "x");
	assert_true(cnl_oidc_looks_like(t));
	free(t);
	assert_true(
	    cnl_auth_jwt_sign(&c, key, sizeof(key) - 1, hs, sizeof(hs)) > 0);
	assert_false(cnl_oidc_looks_like(hs));
	t = tok_raw("{\"alg\":\"none\"}", "{}", "");
	assert_false(cnl_oidc_looks_like(t));
	free(t);
	assert_false(cnl_oidc_looks_like(NULL));
	assert_false(cnl_oidc_looks_like(""));
	assert_false(cnl_oidc_looks_like("cnl_abc"));
	assert_false(cnl_oidc_looks_like("a.b"));
	assert_false(cnl_oidc_looks_like("e30.e30.e30.e30"));
	assert_false(cnl_oidc_looks_like("!!.e30.e30"));
}

/* ------------------------------------------------------------------------ */
/* Configuration and JWKS errors                                            */
/* ------------------------------------------------------------------------ */

static void config_refused(const struct cnl_oidc_config *cfg, int want,
                           const char *why)
{
	struct cnl_oidc *o = (struct cnl_oidc *)&o; /* must stay as it is */
	struct cnl_oidc *const before = o;
	char err[512] = "";

	assert_int_equal(cnl_oidc_new(cfg, &o, err, sizeof(err)), want);
	assert_ptr_equal(o, before);
	if (!strstr(err, why))
		fail_msg("err \"%s\" lacks \"%s\"", err, why);
}

/* A JWKS file holding @text must be refused with @want naming @why. */
static void jwks_refused(const char *text, int want, const char *why)
{
	struct cnl_oidc_config cfg = {
	    .issuer = ISS, .audience = AUD, .jwks_file = F.other};

	write_file(F.other, text);
	config_refused(&cfg, want, why);
}

static void jwks_keys_refused(json_t *keys, const char *why)
{
	char *s = jwks_text(keys);

	jwks_refused(s, -CNL_EPARSE, why);
	free(s);
}

static void test_config_errors(void **state)
{
	struct cnl_oidc_config c;

	(void)state;
	c = (struct cnl_oidc_config){.audience = AUD, .jwks_file = F.jwks};
	config_refused(&c, -CNL_ECONFIG, "issuer");
	c = (struct cnl_oidc_config){.issuer = ISS, .jwks_file = F.jwks};
	config_refused(&c, -CNL_ECONFIG, "audience");
	c = (struct cnl_oidc_config){.issuer = ISS, .audience = AUD};
	config_refused(&c, -CNL_ECONFIG, "exactly one");
	c = (struct cnl_oidc_config){.issuer = ISS,
	                             .audience = AUD,
	                             .jwks_file = F.jwks,
	                             .jwks_url = S.url};
	config_refused(&c, -CNL_ECONFIG, "exactly one");
	c = (struct cnl_oidc_config){
	    .issuer = ISS, .audience = AUD, .jwks_url = "file:///etc/passwd"};
	config_refused(&c, -CNL_ECONFIG, "only http:// and https://");
	c = (struct cnl_oidc_config){.issuer = ISS,
	                             .audience = AUD,
	                             .jwks_file = F.jwks,
	                             .username_claim = ""};
	config_refused(&c, -CNL_ECONFIG, "username_claim");
	c = (struct cnl_oidc_config){.issuer = ISS,
	                             .audience = AUD,
	                             .jwks_file = "/nonexistent/jwks.json"};
	config_refused(&c, -ENOENT, "/nonexistent/jwks.json");
	config_refused(NULL, -EINVAL, "NULL");
}

static void test_jwks_errors(void **state)
{
	json_t *k, *keys;
	char *big;

	(void)state;
	jwks_refused("this is not json", -CNL_EPARSE, "not JSON");
	jwks_refused("", -CNL_EPARSE, "not JSON");
	jwks_refused("[]", -CNL_EPARSE, "no \"keys\" array");
	jwks_refused("{\"keys\":{}}", -CNL_EPARSE, "no \"keys\" array");
	jwks_refused("{\"keys\":[],\"keys\":[]}", -CNL_EPARSE, "not JSON");
	jwks_refused("{\"keys\":[]}", -CNL_EPARSE, "no RS256 keys");
	jwks_refused("{\"keys\":[1]}", -CNL_EPARSE, "key 0: not a JSON object");
	jwks_refused("{\"keys\":[{\"kid\":\"x\"}]}", -CNL_EPARSE, "\"kty\"");
	/* Only keys for other algorithms or uses. */
	jwks_keys_refused(json_pack("[{s:s,s:s,s:s,s:s,s:s},{s:s,s:s}]", "kty",
	                            "EC", "crv", "P-256", "kid", "e1", "x",
	                            "AAAA", "y", "AAAA", "kty", "oct", "k",
	                            "c2VjcmV0"),
	                  "no RS256 keys (2 keys, none RSA for signing)");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "alg", json_string("RS512"));
	jwks_keys_refused(json_pack("[o]", k), "no RS256 keys");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "use", json_string("enc"));
	jwks_keys_refused(json_pack("[o]", k), "no RS256 keys");

	/* Usable RSA keys that are malformed fail the whole set. */
	jwks_keys_refused(json_pack("[o,o]", jwk(F.k2, "k2"), jwk(F.k1, NULL)),
	                  "key 1: RSA key without \"kid\"");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "kid", json_string(""));
	jwks_keys_refused(json_pack("[o]", k), "without \"kid\"");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "n", json_string("abc="));
	jwks_keys_refused(json_pack("[o]", k),
	                  "key \"k1\": \"n\" is not valid base64url");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "e", json_string("AQ+B"));
	jwks_keys_refused(json_pack("[o]", k), "\"e\" is not valid base64url");
	k = jwk(F.k1, "k1");
	json_object_del(k, "n");
	jwks_keys_refused(json_pack("[o]", k), "\"n\" missing");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "e", json_string("AQAA")); /* even */
	jwks_keys_refused(json_pack("[o]", k), "odd exponent");
	k = jwk(F.k1, "k1");
	json_object_set_new(k, "e", json_string("AQ")); /* 1 */
	jwks_keys_refused(json_pack("[o]", k), "odd exponent");
	jwks_keys_refused(json_pack("[o]", jwk(F.small, "s")),
	                  "modulus of 1024 bits");
	jwks_keys_refused(json_pack("[o,o]", jwk(F.k1, "k1"), jwk(F.k2, "k1")),
	                  "key \"k1\" listed twice");

	/* Too many keys, too many bytes. */
	keys = json_array();
	for (int i = 0; i <= CNL_OIDC_KEYS_MAX; i++)
		json_array_append_new(keys, json_pack("{s:s}", "kty", "oct"));
	jwks_keys_refused(keys, "more than the 64 allowed");
	big = malloc(CNL_OIDC_JWKS_MAX + 2);
	assert_non_null(big);
	memset(big, ' ', CNL_OIDC_JWKS_MAX + 1);
	big[CNL_OIDC_JWKS_MAX + 1] = '\0';
	jwks_refused(big, -CNL_ESIZE, "larger than 256 KiB");
	free(big);
}

/* ------------------------------------------------------------------------ */
/* Reload                                                                   */
/* ------------------------------------------------------------------------ */

static void test_reload(void **state)
{
	char err[512] = "";
	struct cnl_oidc *o;

	(void)state;
	write_jwks(F.other, json_pack("[o]", jwk(F.k1, "k1")));
	o = new_file(F.other);
	accepted_at(o, tok(claims(), "k1", F.k1), NOW, "alice");
	refused_at(o, tok(claims(), "k3", F.k3), NOW, "unknown");

	/* Rotated: k1 is gone, k3 came. */
	write_jwks(F.other, json_pack("[o]", jwk(F.k3, "k3")));
	assert_int_equal(cnl_oidc_reload(o, err, sizeof(err)), 0);
	refused_at(o, tok(claims(), "k1", F.k1), NOW, "unknown");
	accepted_at(o, tok(claims(), "k3", F.k3), NOW, "alice");

	/* A broken file or a missing one: the reload fails, k3 stays. */
	write_file(F.other, "{\"keys\": [ oops");
	assert_int_equal(cnl_oidc_reload(o, err, sizeof(err)), -CNL_EPARSE);
	assert_non_null(strstr(err, "not JSON"));
	accepted_at(o, tok(claims(), "k3", F.k3), NOW, "alice");
	write_jwks(F.other, json_pack("[o]", jwk(F.small, "small")));
	assert_int_equal(cnl_oidc_reload(o, err, sizeof(err)), -CNL_EPARSE);
	assert_non_null(strstr(err, "modulus"));
	accepted_at(o, tok(claims(), "k3", F.k3), NOW, "alice");
	assert_int_equal(unlink(F.other), 0);
	assert_int_equal(cnl_oidc_reload(o, err, sizeof(err)), -ENOENT);
	accepted_at(o, tok(claims(), "k3", F.k3), NOW, "alice");
	cnl_oidc_free(o);
}

/* Several verifiers against a set being swapped all the time. */
struct hammer {
	struct cnl_oidc *o;
	const char *token;
	int ok;
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;
	struct cnl_oidc_identity id;

	for (int i = 0; i < 40; i++)
		if (cnl_oidc_verify(h->o, h->token, NOW, &id, NULL, 0) == 0 &&
		    strcmp(id.username, "alice") == 0)
			h->ok++;
	return NULL;
}

static void test_concurrent_verify_and_reload(void **state)
{
	struct hammer h[4];
	pthread_t th[4];
	char *t = tok(claims(), "k2", F.k2);
	int reloads = 0;

	(void)state;
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.o = F.o, .token = t};
		assert_int_equal(
		    pthread_create(&th[i], NULL, hammer_run, &h[i]), 0);
	}
	for (int i = 0; i < 20; i++)
		reloads += cnl_oidc_reload(F.o, NULL, 0) == 0;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(h[i].ok, 40);
	}
	assert_int_equal(reloads, 20);
	free(t);
}

/* ------------------------------------------------------------------------ */
/* JWKS over HTTP                                                           */
/* ------------------------------------------------------------------------ */

static void test_url_fetch_and_rotation(void **state)
{
	struct cnl_oidc *o = NULL;
	char err[512] = "";
	int h0;

	(void)state;
	serve_set(200, jwks_text(json_pack("[o]", jwk(F.k1, "k1"))));
	h0 = hits();
	assert_int_equal(new_url(S.url, &o, err, sizeof(err)), 0);
	assert_int_equal(hits(), h0 + 1);
	accepted_at(o, tok(claims(), "k1", F.k1), NOW, "alice");
	accepted_at(o, tok(claims(), NULL, F.k1), NOW, "alice");
	assert_int_equal(hits(), h0 + 1);

	/* The provider rotates in k3; the first k3 token causes a refetch. */
	serve_set(200, jwks_text(json_pack("[o,o]", jwk(F.k1, "k1"),
	                                   jwk(F.k3, "k3"))));
	accepted_at(o, tok(claims(), "k3", F.k3), NOW, "alice");
	assert_int_equal(hits(), h0 + 2);
	accepted_at(o, tok(claims(), "k3", F.k3), NOW, "alice");
	assert_int_equal(hits(), h0 + 2);

	/* Made-up kids: at most one fetch per CNL_OIDC_REFETCH_S. */
	refused_at(o, tok(claims(), "zz", F.k3), NOW + 10, "unknown");
	refused_at(o, tok(claims(), "zz", F.k3), NOW + CNL_OIDC_REFETCH_S - 1,
	           "unknown");
	assert_int_equal(hits(), h0 + 2);
	refused_at(o, tok(claims(), "zz", F.k3), NOW + CNL_OIDC_REFETCH_S,
	           "after fetching the JWKS again");
	assert_int_equal(hits(), h0 + 3);

	/* A failed refetch keeps the keys and says why in the refusal. */
	serve_set(500, strdup("oops"));
	refused_at(o, tok(claims(), "zz", F.k3), NOW + 200, "HTTP status 500");
	assert_int_equal(hits(), h0 + 4);
	accepted_at(o, tok(claims(), "k3", F.k3), NOW + 200, "alice");

	/* Explicit reload: failure keeps the keys, success replaces them. */
	serve_set(404, strdup("not found"));
	assert_int_equal(cnl_oidc_reload(o, err, sizeof(err)), -EIO);
	assert_non_null(strstr(err, "HTTP status 404"));
	accepted_at(o, tok(claims(), "k1", F.k1), NOW, "alice");
	serve_set(200, jwks_text(json_pack("[o]", jwk(F.k2, "k2"))));
	assert_int_equal(cnl_oidc_reload(o, err, sizeof(err)), 0);
	accepted_at(o, tok(claims(), "k2", F.k2), NOW, "alice");
	/* k1 is gone; the last refetch was at NOW + 200, so none now. */
	h0 = hits();
	refused_at(o, tok(claims(), "k1", F.k1), NOW + 250, "unknown");
	assert_int_equal(hits(), h0);
	cnl_oidc_free(o);
}

static void url_refused(const char *url, int want, const char *why)
{
	struct cnl_oidc *o = (struct cnl_oidc *)&o;
	char err[512] = "";

	assert_int_equal(new_url(url, &o, err, sizeof(err)), want);
	assert_ptr_equal(o, (struct cnl_oidc *)&o);
	if (!strstr(err, why))
		fail_msg("err \"%s\" lacks \"%s\"", err, why);
}

static void test_url_errors(void **state)
{
	struct sockaddr_in sa = {0};
	socklen_t salen = sizeof(sa);
	char url[64], *big;
	int fd;

	(void)state;
	serve_set(404, strdup("no such thing"));
	url_refused(S.url, -EIO, "HTTP status 404");
	serve_set(200, strdup("<html>hello</html>"));
	url_refused(S.url, -CNL_EPARSE, "not JSON");
	serve_set(200, strdup("{\"keys\":[]}"));
	url_refused(S.url, -CNL_EPARSE, "no RS256 keys");
	big = malloc(CNL_OIDC_JWKS_MAX + 2);
	assert_non_null(big);
	memset(big, ' ', CNL_OIDC_JWKS_MAX + 1);
	big[CNL_OIDC_JWKS_MAX + 1] = '\0';
	serve_set(200, big);
	url_refused(S.url, -CNL_ESIZE, "larger than 256 KiB");

	/* Nobody listening: a port we bound and closed again. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &salen), 0);
	close(fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/jwks.json",
	         (unsigned)ntohs(sa.sin_port));
	url_refused(url, -EIO, url);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_good_token),
	    cmocka_unit_test(test_clock_skew),
	    cmocka_unit_test(test_single_key_without_kid),
	    cmocka_unit_test(test_username_claim_config),
	    cmocka_unit_test(test_alg_refused),
	    cmocka_unit_test(test_kid_and_signature_refused),
	    cmocka_unit_test(test_claims_refused),
	    cmocka_unit_test(test_malformed_refused),
	    cmocka_unit_test(test_null_args),
	    cmocka_unit_test(test_looks_like),
	    cmocka_unit_test(test_config_errors),
	    cmocka_unit_test(test_jwks_errors),
	    cmocka_unit_test(test_reload),
	    cmocka_unit_test(test_concurrent_verify_and_reload),
	    cmocka_unit_test(test_url_fetch_and_rotation),
	    cmocka_unit_test(test_url_errors),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
