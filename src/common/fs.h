/*
 * fs.h - small file-system helpers every binary shares: writing beneath a
 * folder without following links (what a tenant or a server planted in a
 * folder must never lead out of it), and bytes as hex.
 */
#ifndef CNL_COMMON_FS_H
#define CNL_COMMON_FS_H

#include <stddef.h>
#include <sys/types.h>

/*
 * cnl_mkdirs_beneath - create the folders of @rel (a relative path whose
 * last component is a file; no "." or ".." components) beneath the open
 * folder @top, with @mode, following no link on the way: an existing
 * component that is a link fails with -ELOOP or -ENOTDIR.  The open
 * folder of the file in *ret_dfd (to close); 0 or -errno.
 */
int cnl_mkdirs_beneath(int top, const char *rel, mode_t mode, int *ret_dfd);

/* cnl_write_all - all @n bytes of @buf to @fd, a write interrupted by a
 * signal resumed: 0, or -errno (-EIO for a write that took nothing). */
int cnl_write_all(int fd, const void *buf, size_t n);

/* cnl_digest_hex - "sha256:<64 lowercase hex>" -> the hex in it; NULL when
 * @digest (NULL allowed) is no such digest. */
const char *cnl_digest_hex(const char *digest);

/* cnl_hex - @n bytes as 2n lowercase hex digits and a NUL into @out. */
void cnl_hex(const unsigned char *bytes, size_t n, char *out);

/* cnl_hex_digit - the value of hex digit @c (either case), or -1. */
int cnl_hex_digit(int c);

#endif /* CNL_COMMON_FS_H */
