/*
 * secrets.h - the platform's secrets at rest: a key the operator provides
 * (secrets_key_file, never in the data directory, so that the database and
 * its backups alone reveal nothing), and each value sealed with
 * AES-256-GCM under it.
 *
 * A sealed value is "v1:" then base64 (standard, padded) of a 12-byte
 * random nonce, the ciphertext and the 16-byte tag.  The additional data
 * is the secret's place (its scope and owner and its name): a sealed value
 * copied onto another secret's row in the database does not open there.
 *
 * The key file holds the 32 bytes of the key as 64 hexadecimal digits
 * (one line; `openssl rand -hex 32 > secrets.key`).  It must be a regular
 * file that only its owner may read or write (0600 or 0400), and it must
 * not lie inside the data directory.  The key's id (16 hex digits of a
 * SHA-256 over it) is stored beside each value, so that a value sealed
 * under another key is named as such, not taken for a corrupt one.
 */
#ifndef CNL_SERVER_SECRETS_H
#define CNL_SERVER_SECRETS_H

#include <stddef.h>
#include <stdint.h>

#define CNL_SECRET_KEY_LEN 32
#define CNL_SECRET_KEY_ID  17 /* 16 hex digits and the NUL */
/* The largest value of one secret, in bytes. */
#define CNL_SECRET_VALUE_MAX (64 * 1024)

/*
 * cnl_secret_key_load - read the key of @path into @key, refusing a file
 * that is not regular, that others may read or write, that does not hold
 * 64 hex digits, or that lies under @data_dir (NULL: not checked).  0, or
 * a negative errno (-CNL_ECONFIG for a bad file) with @err saying why.
 */
int cnl_secret_key_load(const char *path, const char *data_dir,
                        uint8_t key[CNL_SECRET_KEY_LEN], char *err,
                        size_t errlen);

/*
 * cnl_secret_key_make - a new random key written to @path (0600, made with
 * O_EXCL; its folder made 0700 when missing), then loaded as above.  A
 * file already there is loaded, not replaced.  0 or a negative errno.
 */
int cnl_secret_key_make(const char *path, const char *data_dir,
                        uint8_t key[CNL_SECRET_KEY_LEN], char *err,
                        size_t errlen);

/* cnl_secret_key_id - the key's id: 16 hex digits. */
void cnl_secret_key_id(const uint8_t key[CNL_SECRET_KEY_LEN],
                       char out[CNL_SECRET_KEY_ID]);

/*
 * cnl_secret_seal - @n bytes of @value sealed under @key for place @aad:
 * a new string (free() it) in *@ret; 0, -CNL_ESIZE beyond
 * CNL_SECRET_VALUE_MAX, -EIO when the cipher or the randomness failed.
 */
int cnl_secret_seal(const uint8_t key[CNL_SECRET_KEY_LEN], const char *aad,
                    const uint8_t *value, size_t n, char **ret);

/*
 * cnl_secret_open - the value sealed in @sealed for place @aad: a new
 * buffer of *@ret_n bytes and a NUL (free() it, best after
 * explicit_bzero).  0, -CNL_EPARSE for text that is not a sealed value,
 * -CNL_EAUTH when it does not open (another key, another place, altered).
 */
int cnl_secret_open(const uint8_t key[CNL_SECRET_KEY_LEN], const char *aad,
                    const char *sealed, uint8_t **ret, size_t *ret_n);

#endif /* CNL_SERVER_SECRETS_H */
