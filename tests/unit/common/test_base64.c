/*
 * test_base64.c - the one base64 (common/base64.h): the RFC 4648 vectors in
 * both alphabets, padded and not; strict refusal of everything that is not
 * the one canonical spelling (foreign characters, whitespace, misplaced or
 * missing '=', impossible lengths, non-zero unused bits); output sizes;
 * and the allocating forms with their explicit limits.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/base64.h"

/* ------------------------------------------------------------------------ */
/* base64url                                                                */
/* ------------------------------------------------------------------------ */

static void test_b64url_rfc4648_vectors(void **state)
{
	static const char *const vec[][2] = {
	    {"", ""},
	    {"f", "Zg"},
	    {"fo", "Zm8"},
	    {"foo", "Zm9v"},
	    {"foob", "Zm9vYg"},
	    {"fooba", "Zm9vYmE"},
	    {"foobar", "Zm9vYmFy"},
	};
	char enc[32];
	uint8_t dec[32];

	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		size_t n = strlen(vec[i][0]), e = strlen(vec[i][1]);

		assert_int_equal(
		    cnl_b64_encode(vec[i][0], n, CNL_B64_URL, enc, sizeof(enc)),
		    (int)e);
		assert_string_equal(enc, vec[i][1]);
		assert_int_equal(
		    cnl_b64_decode(vec[i][1], e, CNL_B64_URL, dec, sizeof(dec)),
		    (int)n);
		assert_memory_equal(dec, vec[i][0], n);
	}
}

static void test_b64url_alphabet_and_rejects(void **state)
{
	/* 0xfb 0xff 0xbf is "+/+/" in standard base64. */
	static const uint8_t hi[] = {0xfb, 0xff, 0xbf};
	static const char *const bad[] = {
	    "+/+/",
	    "Zg==",
	    "Zm8=",
	    "Zg=",
	    "Zm9v+",
	    "Zm9/",
	    "Z",
	    "Zm9vY",
	    "Zh",
	    "Zm9",
	    "Zm\n8",
	    "Zm 8",
	    "Zm.8",
	    "Zm\x80"
	    "8",
	};
	char enc[8];
	uint8_t dec[8];

	assert_int_equal(cnl_b64_encode(hi, 3, CNL_B64_URL, enc, sizeof(enc)),
	                 4);
	assert_string_equal(enc, "-_-_");
	assert_int_equal(
	    cnl_b64_decode("-_-_", 4, CNL_B64_URL, dec, sizeof(dec)), 3);
	assert_memory_equal(dec, hi, 3);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(cnl_b64_decode(bad[i], strlen(bad[i]),
		                                CNL_B64_URL, dec, sizeof(dec)),
		                 -CNL_EPARSE);
	/* "Zm9" is non-canonical ('9' has low bits set); "Zm8" is fine. */
	assert_int_equal(
	    cnl_b64_decode("Zm8", 3, CNL_B64_URL, dec, sizeof(dec)), 2);

	/* Output space: "foo" needs 4 characters and a NUL. */
	assert_int_equal(cnl_b64_encode("foo", 3, CNL_B64_URL, enc, 4),
	                 -ENOBUFS);
	assert_int_equal(cnl_b64_decode("Zm9v", 4, CNL_B64_URL, dec, 2),
	                 -ENOBUFS);
}

/* ------------------------------------------------------------------------ */
/* Standard alphabet, padded (the REST API's "data_base64")                 */
/* ------------------------------------------------------------------------ */

static void test_padded_rfc4648_vectors(void **state)
{
	static const char *const vec[][2] = {
	    {"", ""},
	    {"f", "Zg=="},
	    {"fo", "Zm8="},
	    {"foo", "Zm9v"},
	    {"foob", "Zm9vYg=="},
	    {"fooba", "Zm9vYmE="},
	    {"foobar", "Zm9vYmFy"},
	};
	const unsigned f = CNL_B64_STD | CNL_B64_PAD;
	char enc[32];
	uint8_t dec[32];

	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		size_t n = strlen(vec[i][0]), e = strlen(vec[i][1]);

		assert_int_equal(cnl_b64_encoded_len(n, f), e);
		assert_int_equal(
		    cnl_b64_encode(vec[i][0], n, f, enc, sizeof(enc)), (int)e);
		assert_string_equal(enc, vec[i][1]);
		assert_int_equal(
		    cnl_b64_decode(vec[i][1], e, f, dec, sizeof(dec)), (int)n);
		assert_memory_equal(dec, vec[i][0], n);
	}
}

static void test_padded_alphabet_and_rejects(void **state)
{
	static const uint8_t hi[] = {0xfb, 0xff, 0xbf};
	static const char *const bad[] = {
	    "-_-_",      /* URL alphabet */
	    "Zg",        /* padding missing */
	    "Zg=",       /* padding short */
	    "Zm8",       /* padding missing */
	    "Zg===",     /* length */
	    "Z===",      /* three '=' */
	    "====",      /* only padding */
	    "Zg=A",      /* '=' inside */
	    "Z=g=",      /* '=' inside */
	    "Zh==",      /* unused bits set */
	    "Zm9=",      /* unused bits set */
	    "Zm9v\n",    /* whitespace */
	    " Zm9v",     /* whitespace */
	    "Zm 9v",     /* whitespace */
	    "Zm9v Zg==", /* whitespace */
	    "Zm.8",      /* foreign character */
	    "Zg==Zg==",  /* padding inside */
	};
	const unsigned f = CNL_B64_STD | CNL_B64_PAD;
	char enc[8];
	uint8_t dec[8];

	assert_int_equal(cnl_b64_encode(hi, 3, f, enc, sizeof(enc)), 4);
	assert_string_equal(enc, "+/+/");
	assert_int_equal(cnl_b64_decode("+/+/", 4, f, dec, sizeof(dec)), 3);
	assert_memory_equal(dec, hi, 3);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r =
		    cnl_b64_decode(bad[i], strlen(bad[i]), f, dec, sizeof(dec));

		if (r != -CNL_EPARSE)
			fail_msg("\"%s\" gave %d", bad[i], r);
	}
	/* Unpadded standard base64 refuses '=' and takes "Zg". */
	assert_int_equal(cnl_b64_decode("Zg==", 4, CNL_B64_STD, dec, 8),
	                 -CNL_EPARSE);
	assert_int_equal(cnl_b64_decode("Zg", 2, CNL_B64_STD, dec, 8), 1);
	assert_int_equal(cnl_b64_decode("+/+/", 4, CNL_B64_URL, dec, 8),
	                 -CNL_EPARSE);

	/* Output space: "f" padded needs 4 characters and a NUL; a bad
	 * text is refused as bad whatever the buffer. */
	assert_int_equal(cnl_b64_encode("f", 1, f, enc, 4), -ENOBUFS);
	assert_int_equal(cnl_b64_encode("f", 1, f, enc, 5), 4);
	assert_int_equal(cnl_b64_decode("Zm8=", 4, f, dec, 1), -ENOBUFS);
	assert_int_equal(cnl_b64_decode("Zm8=", 4, f, dec, 2), 2);
	assert_int_equal(cnl_b64_decode("Zm8", 3, f, dec, 0), -CNL_EPARSE);
	assert_int_equal(cnl_b64_decode(NULL, 4, f, dec, 8), -EINVAL);
	assert_int_equal(cnl_b64_encode(NULL, 1, f, enc, 8), -EINVAL);
}

/* Every byte string of up to 7 bytes of a few patterns round-trips in all
 * four flag combinations, and decoding takes exactly the encoder's text. */
static void test_round_trip_all_flags(void **state)
{
	uint8_t in[7], dec[8];
	char enc[16];

	for (unsigned f = 0; f < 4; f++)
		for (size_t n = 0; n <= sizeof(in); n++)
			for (int pat = 0; pat < 3; pat++) {
				int e;

				for (size_t i = 0; i < n; i++)
					in[i] = (uint8_t)(pat == 0   ? 0xff
					                  : pat == 1 ? i * 37
					                             : 0);
				e = cnl_b64_encode(in, n, f, enc, sizeof(enc));
				assert_int_equal(
				    e, (int)cnl_b64_encoded_len(n, f));
				assert_int_equal(cnl_b64_decode(enc, (size_t)e,
				                                f, dec,
				                                sizeof(dec)),
				                 (int)n);
				assert_memory_equal(dec, in, n);
			}
}

static void test_allocating_forms_and_limits(void **state)
{
	uint8_t *out = (uint8_t *)"untouched";
	size_t n = 12345;
	char *s;

	s = cnl_b64_encode_new("foob", 4, CNL_B64_PAD);
	assert_string_equal(s, "Zm9vYg==");
	free(s);
	s = cnl_b64_encode_new("", 0, CNL_B64_PAD);
	assert_string_equal(s, "");
	free(s);
	assert_null(cnl_b64_encode_new("x", CNL_B64_INPUT_MAX + 1, 0));

	assert_int_equal(
	    cnl_b64_decode_new("Zm9vYg==", CNL_B64_PAD, 4, &out, &n), 0);
	assert_int_equal(n, 4);
	assert_memory_equal(out, "foob", 4);
	assert_int_equal(out[4], 0); /* usable as a string */
	free(out);

	/* The caller's limit is exact: 4 bytes fit in 4, not in 3. */
	out = (uint8_t *)"untouched";
	n = 12345;
	assert_int_equal(
	    cnl_b64_decode_new("Zm9vYg==", CNL_B64_PAD, 3, &out, &n),
	    -CNL_ESIZE);
	assert_int_equal(
	    cnl_b64_decode_new("Zm9vYg=", CNL_B64_PAD, 100, &out, &n),
	    -CNL_EPARSE);
	assert_string_equal((const char *)out, "untouched");
	assert_int_equal(n, 12345);

	assert_int_equal(cnl_b64_decode_new("", CNL_B64_PAD, 0, &out, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(out[0], 0);
	free(out);
	assert_int_equal(cnl_b64_decode_new(NULL, 0, 1, &out, &n), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_b64url_rfc4648_vectors),
	    cmocka_unit_test(test_b64url_alphabet_and_rejects),
	    cmocka_unit_test(test_padded_rfc4648_vectors),
	    cmocka_unit_test(test_padded_alphabet_and_rejects),
	    cmocka_unit_test(test_round_trip_all_flags),
	    cmocka_unit_test(test_allocating_forms_and_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
