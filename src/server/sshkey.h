/*
 * sshkey.h - OpenSSH keys for `cnlab server ssh` (issue 24): a user's
 * public keys checked before they are authorised in a server's sshd, and
 * each server's own host key.
 *
 * A public key is one line as OpenSSH writes it (`~/.ssh/id_ed25519.pub`):
 * "TYPE BASE64 [COMMENT]".  No options prefix is taken (an authorized_keys
 * line's `command=` or `from=` would be the tenant's to set): the platform
 * writes the authorized_keys file itself.  Types: ssh-ed25519,
 * ecdsa-sha2-nistp256/384/521, ssh-rsa of 2048 bits or more, and the
 * security-key types sk-ssh-ed25519@openssh.com and
 * sk-ecdsa-sha2-nistp256@openssh.com.  The key's blob is decoded and its
 * inner type and sizes checked, so that a line that is not a key is
 * refused here, not later by sshd.
 *
 * A host key is Ed25519, written in OpenSSH's own private key format
 * ("openssh-key-v1", unencrypted: cnlabd keeps it sealed under the secrets
 * key, and the node keeps it on a tmpfs only while a session is open).
 */
#ifndef CNL_SERVER_SSHKEY_H
#define CNL_SERVER_SSHKEY_H

#include <stddef.h>

/* The longest public key line taken (a 16384-bit RSA key is ~2.8 KiB). */
#define CNL_SSHKEY_LINE_MAX 8192
/* "SHA256:" and 43 base64 digits, and the NUL. */
#define CNL_SSHKEY_FP_MAX      51
#define CNL_SSHKEY_TYPE_MAX    48
#define CNL_SSHKEY_COMMENT_MAX 200

struct cnl_sshkey {
	char type[CNL_SSHKEY_TYPE_MAX];
	char fingerprint[CNL_SSHKEY_FP_MAX]; /* "SHA256:..." as ssh-keygen -l */
	char comment[CNL_SSHKEY_COMMENT_MAX];
	char *line; /* "TYPE BASE64[ COMMENT]", malloc'd */
	int bits;   /* the key's size (RSA modulus, curve, 256 for Ed25519) */
};

/*
 * cnl_sshkey_parse - check the public key line @text (one line, surrounding
 * blanks and one final newline allowed) and fill @k (cnl_sshkey_done() it).
 * 0, or -CNL_EPARSE with @err naming what is wrong.
 */
int cnl_sshkey_parse(const char *text, struct cnl_sshkey *k, char *err,
                     size_t errlen);
void cnl_sshkey_done(struct cnl_sshkey *k);

/*
 * cnl_sshkey_host_new - a new Ed25519 host key: its private key in
 * OpenSSH's format (PEM-like armour, newline-ended) in *@priv and its
 * public line ("ssh-ed25519 BASE64") in *@pub, both malloc'd.  @comment
 * goes into the private key.  0 or -EIO.
 */
int cnl_sshkey_host_new(const char *comment, char **priv, char **pub);

#endif /* CNL_SERVER_SSHKEY_H */
