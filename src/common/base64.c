/*
 * base64.c - RFC 4648 base64, both alphabets, padded or not (see base64.h).
 *
 * One encoder and one decoder serve every flag combination.  The decoder
 * validates the whole text (alphabet, padding, length, canonical last
 * character) before it checks the output size or writes a byte, so the
 * answer to bad input never depends on the buffer the caller passed.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "common/base64.h"

static const char alpha_std[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char alpha_url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* The 6-bit value of @ch in the alphabet of @flags, or -1. */
static int value(char ch, unsigned flags)
{
	bool url = flags & CNL_B64_URL;

	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == (url ? '-' : '+'))
		return 62;
	if (ch == (url ? '_' : '/'))
		return 63;
	return -1;
}

size_t cnl_b64_encoded_len(size_t n, unsigned flags)
{
	if (flags & CNL_B64_PAD)
		return (n + 2) / 3 * 4;
	return (4 * n + 2) / 3;
}

int cnl_b64_encode(const void *in, size_t inlen, unsigned flags, char *out,
                   size_t outlen)
{
	const char *a = (flags & CNL_B64_URL) ? alpha_url : alpha_std;
	const uint8_t *p = in;
	size_t i, o = 0;
	uint32_t v;

	if ((!in && inlen) || !out)
		return -EINVAL;
	if (inlen > CNL_B64_INPUT_MAX)
		return -CNL_ESIZE;
	if (outlen < cnl_b64_encoded_len(inlen, flags) + 1)
		return -ENOBUFS;
	for (i = 0; i + 3 <= inlen; i += 3) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		out[o++] = a[v >> 18 & 63];
		out[o++] = a[v >> 12 & 63];
		out[o++] = a[v >> 6 & 63];
		out[o++] = a[v & 63];
	}
	if (inlen - i == 1) {
		v = (uint32_t)p[i] << 16;
		out[o++] = a[v >> 18 & 63];
		out[o++] = a[v >> 12 & 63];
		if (flags & CNL_B64_PAD) {
			out[o++] = '=';
			out[o++] = '=';
		}
	} else if (inlen - i == 2) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		out[o++] = a[v >> 18 & 63];
		out[o++] = a[v >> 12 & 63];
		out[o++] = a[v >> 6 & 63];
		if (flags & CNL_B64_PAD)
			out[o++] = '=';
	}
	out[o] = '\0';
	return (int)o;
}

/*
 * Check @in under @flags; on success the number of characters that carry
 * data (padding excluded) in *@ret_body and the decoded size in *@ret_need.
 */
static int check(const char *in, size_t inlen, unsigned flags, size_t *ret_body,
                 size_t *ret_need)
{
	size_t body = inlen, rem;

	if (flags & CNL_B64_PAD) {
		if (inlen % 4)
			return -CNL_EPARSE;
		/* At most two '='; a third meets the alphabet check below. */
		if (body && in[body - 1] == '=')
			body--;
		if (body && in[body - 1] == '=')
			body--;
	}
	rem = body % 4;
	if (rem == 1)
		return -CNL_EPARSE;
	for (size_t i = 0; i < body; i++)
		if (value(in[i], flags) < 0)
			return -CNL_EPARSE;
	/* Canonical form: the bits past the last whole byte must be zero. */
	if (rem == 2 && (value(in[body - 1], flags) & 0x0f))
		return -CNL_EPARSE;
	if (rem == 3 && (value(in[body - 1], flags) & 0x03))
		return -CNL_EPARSE;
	*ret_body = body;
	*ret_need = body / 4 * 3 + (rem ? rem - 1 : 0);
	return 0;
}

/* Decode @body checked characters into @out, which has room for them. */
static size_t decode(const char *in, size_t body, unsigned flags, uint8_t *out)
{
	uint32_t v = 0;
	size_t o = 0;
	int bits = 0;

	for (size_t i = 0; i < body; i++) {
		v = (v << 6 | (uint32_t)value(in[i], flags)) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (uint8_t)(v >> bits);
		}
	}
	return o;
}

int cnl_b64_decode(const char *in, size_t inlen, unsigned flags, uint8_t *out,
                   size_t outlen)
{
	size_t body, need;
	int r;

	if ((!in && inlen) || (!out && outlen))
		return -EINVAL;
	if (inlen > CNL_B64_INPUT_MAX)
		return -CNL_ESIZE;
	if ((r = check(in, inlen, flags, &body, &need)) < 0)
		return r;
	if (need > outlen)
		return -ENOBUFS;
	return (int)decode(in, body, flags, out);
}

char *cnl_b64_encode_new(const void *in, size_t n, unsigned flags)
{
	size_t len;
	char *out;

	if ((!in && n) || n > CNL_B64_INPUT_MAX)
		return NULL;
	len = cnl_b64_encoded_len(n, flags) + 1;
	out = cnl_xmalloc(len);
	cnl_b64_encode(in, n, flags, out, len);
	return out;
}

int cnl_b64_decode_new(const char *in, unsigned flags, size_t max,
                       uint8_t **ret, size_t *ret_len)
{
	size_t inlen, body, need;
	uint8_t *out;
	int r;

	if (!in || !ret || !ret_len)
		return -EINVAL;
	inlen = strnlen(in, CNL_B64_INPUT_MAX + 1);
	if (inlen > CNL_B64_INPUT_MAX)
		return -CNL_ESIZE;
	if ((r = check(in, inlen, flags, &body, &need)) < 0)
		return r;
	if (need > max)
		return -CNL_ESIZE;
	out = cnl_xcalloc(1, need + 1);
	*ret_len = decode(in, body, flags, out);
	*ret = out;
	return 0;
}
