/*
 * id.c - ULID-based identifiers (see id.h).
 *
 * The 128-bit value (time << 80 | random) is held in an unsigned __int128
 * while encoding, which turns base32 into shifts and masks; the random part
 * is kept as 10 big-endian bytes so that "add one" carries naturally.  The
 * seeded generator is splitmix64, chosen because it is tiny and any seed,
 * including 0, gives a good stream.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "cnlab/errors.h"
#include "common/id.h"

#define TIME_MAX ((INT64_C(1) << 48) - 1)

static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

void cnl_id_gen_init(struct cnl_id_gen *g, uint64_t seed)
{
	memset(g, 0, sizeof(*g));
	g->last_ms = -1;
	g->seeded = true;
	g->rng_state = seed;
}

void cnl_id_gen_init_random(struct cnl_id_gen *g)
{
	memset(g, 0, sizeof(*g));
	g->last_ms = -1;
}

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

static int fill_random(struct cnl_id_gen *g, uint8_t out[10])
{
	if (g->seeded) {
		uint64_t a = splitmix64(&g->rng_state);
		uint64_t b = splitmix64(&g->rng_state);
		memcpy(out, &a, 8);
		memcpy(out + 8, &b, 2);
		return 0;
	}
	for (size_t got = 0; got < 10;) {
		ssize_t n = getrandom(out + got, 10 - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

static bool valid_prefix(const char *p, size_t n)
{
	if (n < 1 || n > CNL_ID_PREFIX_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < 'a' || p[i] > 'z')
			return false;
	}
	return true;
}

int cnl_id_new(struct cnl_id_gen *g, const char *prefix, int64_t now_ms,
               char *buf, size_t len)
{
	size_t plen = strlen(prefix);
	uint8_t rnd[10];
	int64_t ms;
	unsigned __int128 v = 0;
	int r;

	if (!valid_prefix(prefix, plen))
		return -EINVAL;
	if (now_ms < 0 || now_ms > TIME_MAX)
		return -ERANGE;
	if (len < plen + 1 + CNL_ID_ULID_LEN + 1)
		return -ENOSPC;

	if (g->last_ms >= 0 && now_ms <= g->last_ms) {
		/* Same millisecond, or the clock went back: last + 1. */
		int i;

		ms = g->last_ms;
		memcpy(rnd, g->last, sizeof(rnd));
		for (i = 9; i >= 0 && ++rnd[i] == 0; i--)
			;
		if (i < 0)
			return -EOVERFLOW;
	} else {
		/* The seeded state is only advanced once nothing can fail. */
		struct cnl_id_gen tmp = *g;

		ms = now_ms;
		r = fill_random(&tmp, rnd);
		if (r < 0)
			return r;
		g->rng_state = tmp.rng_state;
	}
	g->last_ms = ms;
	memcpy(g->last, rnd, sizeof(rnd));

	v = (unsigned __int128)ms;
	for (int i = 0; i < 10; i++)
		v = v << 8 | rnd[i];
	memcpy(buf, prefix, plen);
	buf[plen] = '_';
	for (int i = 0; i < CNL_ID_ULID_LEN; i++)
		buf[plen + 1 + i] =
		    alphabet[(v >> (5 * (CNL_ID_ULID_LEN - 1 - i))) & 31];
	buf[plen + 1 + CNL_ID_ULID_LEN] = '\0';
	return (int)(plen + 1 + CNL_ID_ULID_LEN);
}

/* The value of one Crockford character, or -1 if it is not one. */
static int decode_char(char c)
{
	if (c >= 'a' && c <= 'z')
		c = (char)(c - 'a' + 'A');
	for (int i = 0; i < 32; i++) {
		if (alphabet[i] == c)
			return i;
	}
	return -1;
}

int cnl_id_parse(const char *id, char *ret_prefix, size_t plen, int64_t *ret_ms)
{
	const char *sep = strchr(id, '_');
	const char *u;
	size_t n;
	int64_t ms = 0;

	if (!sep)
		return -CNL_EPARSE;
	n = (size_t)(sep - id);
	u = sep + 1;
	if (!valid_prefix(id, n) || strlen(u) != CNL_ID_ULID_LEN)
		return -CNL_EPARSE;
	for (int i = 0; i < CNL_ID_ULID_LEN; i++) {
		int d = decode_char(u[i]);
		if (d < 0 || (i == 0 && d > 7))
			return -CNL_EPARSE;
		/* The first 10 characters hold the 48-bit time (50 bits). */
		if (i < 10)
			ms = ms << 5 | d;
	}
	if (ret_prefix && plen < n + 1)
		return -ENOSPC;
	if (ret_prefix) {
		memcpy(ret_prefix, id, n);
		ret_prefix[n] = '\0';
	}
	if (ret_ms)
		*ret_ms = ms;
	return 0;
}
