/*
 * secrets.c - the secrets key and AES-256-GCM sealing (secrets.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/fs.h"
#include "common/util.h"
#include "server/secrets.h"

#define NONCE_LEN 12
#define TAG_LEN   16
#define PREFIX    "v1:"

/* Whether the real path @p lies in (or is) the real path @dir. */
static bool inside(const char *p, const char *dir)
{
	size_t n = strlen(dir);

	while (n > 1 && dir[n - 1] == '/')
		n--;
	return strncmp(p, dir, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

int cnl_secret_key_load(const char *path, const char *data_dir,
                        uint8_t key[CNL_SECRET_KEY_LEN], char *err,
                        size_t errlen)
{
	char buf[130], real[PATH_MAX], realdir[PATH_MAX];
	struct stat st;
	ssize_t n;
	size_t len;
	int fd, r = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "secrets_key_file %s: %s", path,
		         strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "secrets_key_file %s: not a regular file",
		         path);
		r = -CNL_ECONFIG;
		goto out;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen,
		         "secrets_key_file %s: mode %03o lets others read or "
		         "write it; it must be 0600 or 0400 (chmod 600 %s)",
		         path, (unsigned)(st.st_mode & 0777), path);
		r = -CNL_ECONFIG;
		goto out;
	}
	if (data_dir && realpath(path, real) && realpath(data_dir, realdir) &&
	    inside(real, realdir)) {
		snprintf(err, errlen,
		         "secrets_key_file %s lies inside the data directory "
		         "%s: keep the key apart from the database it protects "
		         "(a backup of one must not hold the other)",
		         path, data_dir);
		r = -CNL_ECONFIG;
		goto out;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		r = -errno;
		snprintf(err, errlen, "secrets_key_file %s: %s", path,
		         strerror(errno));
		goto out;
	}
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	if (len != 2 * CNL_SECRET_KEY_LEN ||
	    buf[len + strspn(buf + len, "\r\n")]) {
		snprintf(
		    err, errlen,
		    "secrets_key_file %s: must hold the key as 64 "
		    "hexadecimal digits on one line (openssl rand -hex 32)",
		    path);
		r = -CNL_ECONFIG;
		goto out;
	}
	for (size_t i = 0; i < CNL_SECRET_KEY_LEN; i++) {
		int hi = cnl_hex_digit(buf[2 * i]),
		    lo = cnl_hex_digit(buf[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			snprintf(err, errlen,
			         "secrets_key_file %s: must hold the key as 64 "
			         "hexadecimal digits on one line (openssl rand "
			         "-hex 32)",
			         path);
			r = -CNL_ECONFIG;
			goto out;
		}
		key[i] = (uint8_t)(hi << 4 | lo);
	}
out:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return r;
}

/* @dir and the folders above it, each new one 0700. */
static int mkdir_parents(char *dir)
{
	for (char *p = dir + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;

		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			*p = c;
			return -1;
		}
		*p = c;
		if (!c)
			return 0;
	}
}

int cnl_secret_key_make(const char *path, const char *data_dir,
                        uint8_t key[CNL_SECRET_KEY_LEN], char *err,
                        size_t errlen)
{
	uint8_t raw[CNL_SECRET_KEY_LEN];
	char hex[2 * CNL_SECRET_KEY_LEN + 2], dir[PATH_MAX];
	char *slash;
	int fd, r;

	if (access(path, F_OK) == 0)
		return cnl_secret_key_load(path, data_dir, key, err, errlen);
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) && slash != dir) {
		*slash = '\0';
		if (mkdir_parents(dir) < 0) {
			r = -errno;
			snprintf(err, errlen, "%s: %s", dir, strerror(errno));
			return r;
		}
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		snprintf(err, errlen, "no randomness for the secrets key");
		return -EIO;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	hex[2 * CNL_SECRET_KEY_LEN] = '\n';
	hex[2 * CNL_SECRET_KEY_LEN + 1] = '\0';
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	          0600);
	if (fd < 0 && errno == EEXIST) /* another start made it first */
		r = 0;
	else if (fd < 0 || fchmod(fd, 0600) < 0 ||
	         write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) ||
	         fsync(fd) < 0) {
		r = -errno;
		snprintf(err, errlen, "secrets_key_file %s: %s", path,
		         strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
		goto out;
	}
	if (fd >= 0)
		close(fd);
	r = cnl_secret_key_load(path, data_dir, key, err, errlen);
out:
	explicit_bzero(raw, sizeof(raw));
	explicit_bzero(hex, sizeof(hex));
	return r;
}

void cnl_secret_key_id(const uint8_t key[CNL_SECRET_KEY_LEN],
                       char out[CNL_SECRET_KEY_ID])
{
	static const char label[] = "cnlab secrets key id";
	uint8_t in[sizeof(label) + CNL_SECRET_KEY_LEN], md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;

	memcpy(in, label, sizeof(label));
	memcpy(in + sizeof(label), key, CNL_SECRET_KEY_LEN);
	if (EVP_Digest(in, sizeof(in), md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen < 8)
		memset(md, 0, 8);
	explicit_bzero(in, sizeof(in));
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

int cnl_secret_seal(const uint8_t key[CNL_SECRET_KEY_LEN], const char *aad,
                    const uint8_t *value, size_t n, char **ret)
{
	EVP_CIPHER_CTX *ctx;
	uint8_t *buf;
	int len, r = -EIO;
	char *b64;

	if (n > CNL_SECRET_VALUE_MAX)
		return -CNL_ESIZE;
	buf = cnl_xmalloc(NONCE_LEN + n + TAG_LEN);
	if (!(ctx = EVP_CIPHER_CTX_new())) {
		free(buf);
		return -EIO;
	}
	if (getrandom(buf, NONCE_LEN, 0) != NONCE_LEN ||
	    EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) !=
	        1 ||
	    EVP_EncryptInit_ex(ctx, NULL, NULL, key, buf) != 1 ||
	    EVP_EncryptUpdate(ctx, NULL, &len, (const uint8_t *)aad,
	                      (int)strlen(aad)) != 1 ||
	    (n && EVP_EncryptUpdate(ctx, buf + NONCE_LEN, &len, value,
	                            (int)n) != 1) ||
	    EVP_EncryptFinal_ex(ctx, buf + NONCE_LEN + n, &len) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN,
	                        buf + NONCE_LEN + n) != 1)
		goto out;
	b64 = cnl_b64_encode_new(buf, NONCE_LEN + n + TAG_LEN,
	                         CNL_B64_STD | CNL_B64_PAD);
	{
		size_t total = strlen(PREFIX) + strlen(b64) + 1;

		*ret = cnl_xmalloc(total);
		snprintf(*ret, total, "%s%s", PREFIX, b64);
	}
	free(b64);
	r = 0;
out:
	EVP_CIPHER_CTX_free(ctx);
	explicit_bzero(buf, NONCE_LEN + n + TAG_LEN);
	free(buf);
	return r;
}

int cnl_secret_open(const uint8_t key[CNL_SECRET_KEY_LEN], const char *aad,
                    const char *sealed, uint8_t **ret, size_t *ret_n)
{
	EVP_CIPHER_CTX *ctx;
	uint8_t *raw = NULL, *out;
	size_t rawn, n;
	int len, r;

	if (strncmp(sealed, PREFIX, strlen(PREFIX)) != 0)
		return -CNL_EPARSE;
	r = cnl_b64_decode_new(
	    sealed + strlen(PREFIX), CNL_B64_STD | CNL_B64_PAD,
	    NONCE_LEN + CNL_SECRET_VALUE_MAX + TAG_LEN, &raw, &rawn);
	if (r < 0)
		return -CNL_EPARSE;
	if (rawn < NONCE_LEN + TAG_LEN) {
		free(raw);
		return -CNL_EPARSE;
	}
	n = rawn - NONCE_LEN - TAG_LEN;
	out = cnl_xmalloc(n + 1);
	if (!(ctx = EVP_CIPHER_CTX_new())) {
		free(raw);
		free(out);
		return -EIO;
	}
	r = -CNL_EAUTH;
	if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) !=
	        1 ||
	    EVP_DecryptInit_ex(ctx, NULL, NULL, key, raw) != 1 ||
	    EVP_DecryptUpdate(ctx, NULL, &len, (const uint8_t *)aad,
	                      (int)strlen(aad)) != 1 ||
	    (n &&
	     EVP_DecryptUpdate(ctx, out, &len, raw + NONCE_LEN, (int)n) != 1) ||
	    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN,
	                        raw + NONCE_LEN + n) != 1 ||
	    EVP_DecryptFinal_ex(ctx, out + n, &len) != 1) {
		explicit_bzero(out, n + 1);
		free(out);
		goto out;
	}
	out[n] = '\0';
	*ret = out;
	*ret_n = n;
	r = 0;
out:
	EVP_CIPHER_CTX_free(ctx);
	free(raw);
	return r;
}
