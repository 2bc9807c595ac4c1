/*
 * fs.c - folders made beneath a folder without following links; hex.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"

int cnl_mkdirs_beneath(int top, const char *rel, mode_t mode, int *ret_dfd)
{
	char part[256];
	const char *s = rel, *slash;
	int dfd = fcntl(top, F_DUPFD_CLOEXEC, 0);

	if (dfd < 0)
		return -errno;
	while ((slash = strchr(s, '/'))) {
		size_t n = (size_t)(slash - s);
		int next;

		if (n == 0 || n >= sizeof(part)) {
			close(dfd);
			return -EINVAL;
		}
		memcpy(part, s, n);
		part[n] = '\0';
		if (mkdirat(dfd, part, mode) < 0 && errno != EEXIST) {
			next = -errno;
			close(dfd);
			return next;
		}
		next = openat(dfd, part,
		              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dfd);
		if (next < 0)
			return -errno;
		dfd = next;
		s = slash + 1;
	}
	*ret_dfd = dfd;
	return 0;
}

void cnl_hex(const unsigned char *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

int cnl_hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

const char *cnl_digest_hex(const char *digest)
{
	if (!digest || strncmp(digest, "sha256:", 7) != 0 ||
	    strlen(digest + 7) != 64 ||
	    strspn(digest + 7, "0123456789abcdef") != 64)
		return NULL;
	return digest + 7;
}

int cnl_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}
