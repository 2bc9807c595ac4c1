/*
 * trace.c - W3C traceparent parsing and formatting, span ids (trace.h).
 *
 * The generator is xoshiro256** per thread, seeded once from getrandom()
 * (the address of a thread-local and the clock if that fails): ids must
 * be unique, not secret, and a request must not pay a system call for
 * them.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/trace.h"

static __thread uint64_t rng[4];
static __thread bool rng_ready;
static __thread bool cur_set;
static __thread struct cnl_trace cur;

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t cnl_trace_random64(void)
{
	uint64_t t, r;

	if (!rng_ready) {
		if (getrandom(rng, sizeof(rng), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(rng)) {
			struct timespec ts;
			uint64_t s;

			clock_gettime(CLOCK_REALTIME, &ts);
			s = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^
			    (uint64_t)(uintptr_t)&rng_ready;
			for (int i = 0; i < 4; i++)
				rng[i] = splitmix(&s);
		}
		if (!(rng[0] | rng[1] | rng[2] | rng[3]))
			rng[0] = 1;
		rng_ready = true;
	}
	r = rotl(rng[1] * 5, 7) * 9;
	t = rng[1] << 17;
	rng[2] ^= rng[0];
	rng[3] ^= rng[1];
	rng[1] ^= rng[2];
	rng[0] ^= rng[3];
	rng[2] ^= t;
	rng[3] = rotl(rng[3], 45);
	return r;
}

/* Fill @n bytes with random bits, never all zero. */
static void random_id(uint8_t *b, size_t n)
{
	bool zero = true;

	while (zero) {
		for (size_t i = 0; i < n; i += 8) {
			uint64_t v = cnl_trace_random64();
			size_t k = n - i < 8 ? n - i : 8;

			memcpy(b + i, &v, k);
		}
		for (size_t i = 0; i < n; i++)
			if (b[i])
				zero = false;
	}
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* upper case is invalid in version 00 */
}

/* @n bytes from 2n lower-case hex digits at @s; false if any is not. */
static bool unhex(const char *s, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static bool all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

int cnl_trace_parse(const char *s, struct cnl_trace *ret)
{
	struct cnl_trace t;
	uint8_t ver, flags;

	/* 2 + 1 + 32 + 1 + 16 + 1 + 2 */
	if (!s || strnlen(s, 56) != 55 || s[2] != '-' || s[35] != '-' ||
	    s[52] != '-')
		return -CNL_EPARSE;
	if (!unhex(s, 1, &ver) || ver != 0 || !unhex(s + 3, 16, t.trace_id) ||
	    !unhex(s + 36, 8, t.span_id) || !unhex(s + 53, 1, &flags) ||
	    all_zero(t.trace_id, 16) || all_zero(t.span_id, 8))
		return -CNL_EPARSE;
	t.flags = flags & CNL_TRACE_SAMPLED;
	*ret = t;
	return 0;
}

void cnl_trace_hex(const uint8_t *b, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

void cnl_trace_format(const struct cnl_trace *t, char buf[CNL_TRACE_HEADER_MAX])
{
	memcpy(buf, "00-", 3);
	cnl_trace_hex(t->trace_id, 16, buf + 3);
	buf[35] = '-';
	cnl_trace_hex(t->span_id, 8, buf + 36);
	buf[52] = '-';
	buf[53] = '0';
	buf[54] = (t->flags & CNL_TRACE_SAMPLED) ? '1' : '0';
	buf[55] = '\0';
}

void cnl_trace_new(bool sampled, struct cnl_trace *ret)
{
	random_id(ret->trace_id, sizeof(ret->trace_id));
	random_id(ret->span_id, sizeof(ret->span_id));
	ret->flags = sampled ? CNL_TRACE_SAMPLED : 0;
}

void cnl_trace_child(const struct cnl_trace *parent, struct cnl_trace *ret)
{
	struct cnl_trace t = *parent;

	random_id(t.span_id, sizeof(t.span_id));
	*ret = t;
}

void cnl_trace_set_current(const struct cnl_trace *t)
{
	cur_set = t != NULL;
	if (t)
		cur = *t;
}

const struct cnl_trace *cnl_trace_current(void)
{
	return cur_set ? &cur : NULL;
}
