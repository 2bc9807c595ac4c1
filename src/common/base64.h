/*
 * base64.h - the one base64 of CNLab (RFC 4648): the standard alphabet
 * (sections 4, '+' and '/') and the URL-safe one (section 5, '-' and '_'),
 * with or without '=' padding, chosen by flags on each call.
 *
 * Who uses which:
 *   CNL_B64_URL             JWT parts, API tokens, JWK members (no padding)
 *   CNL_B64_STD             the salt and key of a stored scrypt hash
 *   CNL_B64_STD | CNL_B64_PAD
 *                           "data_base64" and "files" in the REST API (job
 *                           files, artifacts, checkpoints)
 *
 * Decoding is strict, so that every byte string has exactly one accepted
 * spelling: only the chosen alphabet; no whitespace; '=' only as the
 * padding the flags ask for (required with CNL_B64_PAD, refused without);
 * no length of 1 modulo 4; and the unused low bits of the last character
 * must be zero.  A signature therefore cannot be malleated by flipping
 * unused bits, and junk is refused rather than half-decoded.
 *
 * Sizes are explicit: the fixed-buffer functions take the output's size
 * and never write past it; the allocating ones take the largest result
 * the caller accepts; nothing here takes more than CNL_B64_INPUT_MAX
 * bytes or characters.  Pure computation: no I/O, no global state.
 *
 * Return values follow errors.h: -EINVAL for NULL pointers, -CNL_EPARSE
 * for text that is not base64 under the flags, -ENOBUFS for an output
 * buffer too small, -CNL_ESIZE for input beyond the limits.
 */
#ifndef CNL_COMMON_BASE64_H
#define CNL_COMMON_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Flags of every call; 0 is the standard alphabet without padding. */
#define CNL_B64_STD 0u
#define CNL_B64_URL (1u << 0) /* '-' and '_' instead of '+' and '/' */
#define CNL_B64_PAD (1u << 1) /* '=' padding: written, and required */

/* Largest input of any call, in bytes or characters (64 MiB). */
#define CNL_B64_INPUT_MAX ((size_t)64 << 20)

/*
 * cnl_b64_encoded_len - characters (no NUL) that encoding @n bytes with
 * @flags produces.  @n must be at most CNL_B64_INPUT_MAX.
 */
size_t cnl_b64_encoded_len(size_t n, unsigned flags);

/*
 * cnl_b64_encode - encode @inlen bytes of @in into @out (@outlen bytes),
 * NUL-terminated.  Returns the number of characters written (without the
 * NUL), -ENOBUFS when @outlen < cnl_b64_encoded_len() + 1, -CNL_ESIZE for
 * @inlen > CNL_B64_INPUT_MAX, -EINVAL.
 */
int cnl_b64_encode(const void *in, size_t inlen, unsigned flags, char *out,
                   size_t outlen);

/*
 * cnl_b64_decode - decode @inlen characters of @in (need not be
 * NUL-terminated) into @out (@outlen bytes) under the strict rules above.
 * Returns the number of bytes written; -CNL_EPARSE for invalid text (so
 * checked before the output size), then -ENOBUFS when @outlen is too small;
 * -CNL_ESIZE for @inlen > CNL_B64_INPUT_MAX; -EINVAL.
 */
int cnl_b64_decode(const char *in, size_t inlen, unsigned flags, uint8_t *out,
                   size_t outlen);

/*
 * cnl_b64_encode_new - @n bytes of @in encoded with @flags as a new
 * NUL-terminated string (free() it), or NULL when @n exceeds
 * CNL_B64_INPUT_MAX.  Aborts on out-of-memory (util.h's cnl_xmalloc).
 */
char *cnl_b64_encode_new(const void *in, size_t n, unsigned flags);

/*
 * cnl_b64_decode_new - decode the NUL-terminated @in into a new buffer of
 * at most @max bytes (one more is allocated and zeroed, so the result may
 * be used as a string).  Returns 0 with the buffer in *@ret (free() it)
 * and its length in *@ret_len; -CNL_EPARSE for invalid text, -CNL_ESIZE
 * when the result would exceed @max or @in is longer than
 * CNL_B64_INPUT_MAX, -EINVAL; outputs untouched on failure.
 */
int cnl_b64_decode_new(const char *in, unsigned flags, size_t max,
                       uint8_t **ret, size_t *ret_len);

#endif /* CNL_COMMON_BASE64_H */
