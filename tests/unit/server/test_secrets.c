/*
 * test_secrets.c - the secrets key file and AES-256-GCM sealing
 * (server/secrets.h), attacked: a value opens only under its key and at its
 * place; a flipped bit, a swapped place, a truncated or re-encoded value
 * and another key are refused; a key file others may read, one inside the
 * data directory, a link, or one that is not 64 hex digits is refused.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "server/secrets.h"

static char dir[] = "/tmp/cnl-secrets-XXXXXX";

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int teardown(void **state)
{
	(void)state;
	return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static const uint8_t key[CNL_SECRET_KEY_LEN] = {1, 2, 3, 4, 5, 6, 7, 8};

static void test_round_trip(void **state)
{
	const uint8_t v[] = "hunter2\0with a NUL and more";
	uint8_t *out = NULL;
	size_t n = 0;
	char *a = NULL, *b = NULL;

	(void)state;
	assert_int_equal(cnl_secret_seal(key, "user/u1/db", v, sizeof(v), &a),
	                 0);
	assert_int_equal(strncmp(a, "v1:", 3), 0);
	assert_null(memmem(a, strlen(a), "hunter2", 7));
	assert_int_equal(cnl_secret_open(key, "user/u1/db", a, &out, &n), 0);
	assert_int_equal(n, sizeof(v));
	assert_memory_equal(out, v, sizeof(v));
	free(out);
	/* A fresh nonce each time: the same value seals differently. */
	assert_int_equal(cnl_secret_seal(key, "user/u1/db", v, sizeof(v), &b),
	                 0);
	assert_string_not_equal(a, b);
	free(a);
	free(b);
	/* The empty value is a value. */
	assert_int_equal(cnl_secret_seal(key, "p", (const uint8_t *)"", 0, &a),
	                 0);
	assert_int_equal(cnl_secret_open(key, "p", a, &out, &n), 0);
	assert_int_equal(n, 0);
	free(out);
	free(a);
}

static void test_attacks(void **state)
{
	uint8_t other[CNL_SECRET_KEY_LEN] = {9};
	const uint8_t v[] = "the value";
	uint8_t *out = NULL;
	size_t n = 0;
	char *a = NULL, *t;
	size_t len;

	(void)state;
	assert_int_equal(cnl_secret_seal(key, "user/u1/db", v, sizeof(v), &a),
	                 0);
	/* Another place: a row copied onto another secret's. */
	assert_int_equal(cnl_secret_open(key, "user/u2/db", a, &out, &n),
	                 -CNL_EAUTH);
	assert_int_equal(cnl_secret_open(key, "project/u1/db", a, &out, &n),
	                 -CNL_EAUTH);
	/* Another key. */
	assert_int_equal(cnl_secret_open(other, "user/u1/db", a, &out, &n),
	                 -CNL_EAUTH);
	/* Each character changed in turn (another valid base64 letter):
	 * nonce, ciphertext and tag are all covered. */
	len = strlen(a);
	t = strdup(a);
	for (size_t i = 3; i < len && t[i] != '='; i++) {
		char was = t[i];

		t[i] = was == 'A' ? 'B' : 'A';
		int r = cnl_secret_open(key, "user/u1/db", t, &out, &n);
		/* A change in the last character may only touch padding
		 * bits, which the strict decoder refuses as text. */
		assert_true(r == -CNL_EAUTH || r == -CNL_EPARSE);
		t[i] = was;
	}
	/* Truncated: without its tag, or to nothing. */
	t[len - 8] = '\0';
	assert_true(cnl_secret_open(key, "user/u1/db", t, &out, &n) < 0);
	assert_int_equal(cnl_secret_open(key, "user/u1/db", "v1:", &out, &n),
	                 -CNL_EPARSE);
	assert_int_equal(cnl_secret_open(key, "user/u1/db", a + 3, &out, &n),
	                 -CNL_EPARSE);
	assert_int_equal(
	    cnl_secret_open(key, "user/u1/db", "v2:AAAA", &out, &n),
	    -CNL_EPARSE);
	free(t);
	free(a);
}

static void test_size_limit(void **state)
{
	uint8_t *big = calloc(1, CNL_SECRET_VALUE_MAX + 1);
	char *a = NULL;
	uint8_t *out;
	size_t n;

	(void)state;
	assert_int_equal(
	    cnl_secret_seal(key, "x", big, CNL_SECRET_VALUE_MAX, &a), 0);
	assert_int_equal(cnl_secret_open(key, "x", a, &out, &n), 0);
	assert_int_equal(n, CNL_SECRET_VALUE_MAX);
	free(out);
	free(a);
	assert_int_equal(
	    cnl_secret_seal(key, "x", big, CNL_SECRET_VALUE_MAX + 1, &a),
	    -CNL_ESIZE);
	free(big);
}

static void test_key_file(void **state)
{
	char p[128], data[128], in_data[512], err[1024], lnk[128], id1[17],
	    id2[17];
	uint8_t k[CNL_SECRET_KEY_LEN], k2[CNL_SECRET_KEY_LEN];
	const char *hex = "000102030405060708090a0b0c0d0e0f10111213141516171819"
	                  "1a1b1c1d1e1f\n";

	(void)state;
	snprintf(p, sizeof(p), "%s/secrets.key", dir);
	snprintf(data, sizeof(data), "%s/data", dir);
	assert_int_equal(mkdir(data, 0700), 0);
	write_file(p, hex, 0600);
	assert_int_equal(cnl_secret_key_load(p, data, k, err, sizeof(err)), 0);
	for (int i = 0; i < CNL_SECRET_KEY_LEN; i++)
		assert_int_equal(k[i], i);
	/* Others may read it: refused, naming the mode. */
	assert_int_equal(chmod(p, 0640), 0);
	assert_int_equal(cnl_secret_key_load(p, data, k, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_non_null(strstr(err, "640"));
	assert_int_equal(chmod(p, 0400), 0);
	assert_int_equal(cnl_secret_key_load(p, data, k, err, sizeof(err)), 0);
	/* Inside the data directory, even through a path with "..". */
	snprintf(in_data, sizeof(in_data), "%s/../data/k", data);
	write_file(in_data, hex, 0600);
	assert_int_equal(
	    cnl_secret_key_load(in_data, data, k, err, sizeof(err)),
	    -CNL_ECONFIG);
	assert_non_null(strstr(err, "data directory"));
	/* A link: not followed. */
	snprintf(lnk, sizeof(lnk), "%s/link.key", dir);
	assert_int_equal(symlink(p, lnk), 0);
	assert_true(cnl_secret_key_load(lnk, data, k, err, sizeof(err)) < 0);
	/* Not 64 hex digits. */
	write_file(in_data, "00112233\n", 0600);
	assert_int_equal(
	    cnl_secret_key_load(in_data, NULL, k, err, sizeof(err)),
	    -CNL_ECONFIG);
	write_file(in_data,
	           "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1"
	           "c1d1e1f\n",
	           0600);
	assert_int_equal(
	    cnl_secret_key_load(in_data, NULL, k, err, sizeof(err)),
	    -CNL_ECONFIG);
	write_file(in_data,
	           "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1"
	           "d1e1f\nmore\n",
	           0600);
	assert_int_equal(
	    cnl_secret_key_load(in_data, NULL, k, err, sizeof(err)),
	    -CNL_ECONFIG);
	/* Missing. */
	snprintf(in_data, sizeof(in_data), "%s/none.key", dir);
	assert_int_equal(
	    cnl_secret_key_load(in_data, NULL, k, err, sizeof(err)), -ENOENT);
	/* Made: 0600, 64 hex digits, in a new 0700 folder; loaded again the
	 * same; the ids differ between keys. */
	snprintf(in_data, sizeof(in_data), "%s/cfg/cnlab/secrets.key", dir);
	assert_int_equal(
	    cnl_secret_key_make(in_data, data, k, err, sizeof(err)), 0);
	{
		struct stat st;

		assert_int_equal(stat(in_data, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
		assert_int_equal(st.st_size, 65);
	}
	assert_int_equal(
	    cnl_secret_key_make(in_data, data, k2, err, sizeof(err)), 0);
	assert_memory_equal(k, k2, sizeof(k));
	cnl_secret_key_id(k, id1);
	cnl_secret_key_id(key, id2);
	assert_int_equal(strlen(id1), 16);
	assert_string_not_equal(id1, id2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_attacks),
	    cmocka_unit_test(test_size_limit),
	    cmocka_unit_test(test_key_file),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
