/*
 * id.h - prefixed, time-sortable identifiers: srv_01HX5V3J9K2M4N6P8Q0R2S4T6V.
 *
 * An id is a short lowercase prefix naming the kind of object ("job",
 * "srv", "node"), an underscore, and a ULID: 26 Crockford base32 characters
 * encoding a 48-bit millisecond timestamp followed by 80 random bits.  Ids
 * therefore sort by creation time as plain strings, which keeps store scans
 * and API listings in a useful order without a separate column.
 *
 * A generator (struct cnl_id_gen) makes ids strictly increasing even within
 * one millisecond or when the clock steps back: it then reuses the last
 * timestamp and adds one to the last random part, as the ULID "monotonic"
 * specification does.  Time is an argument, and the random source is either
 * getrandom() or a seeded generator, so the simulator can make the same ids
 * on every run.  A generator is not thread-safe; callers lock around it.
 */
#ifndef CNL_ID_H
#define CNL_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest prefix, in characters of [a-z]. */
#define CNL_ID_PREFIX_MAX 8
/* Characters in the ULID part. */
#define CNL_ID_ULID_LEN 26
/* Buffer size that holds any id and its NUL. */
#define CNL_ID_MAX (CNL_ID_PREFIX_MAX + 1 + CNL_ID_ULID_LEN + 1)

/* Generator state; initialise with cnl_id_gen_init*(), then treat opaque. */
struct cnl_id_gen {
	int64_t last_ms;    /* timestamp of the last id, -1 before the first */
	uint8_t last[10];   /* random part of the last id, big-endian */
	bool seeded;        /* random bits from rng_state, not getrandom() */
	uint64_t rng_state; /* splitmix64 state when seeded */
};

/*
 * cnl_id_gen_init - a deterministic generator: the same @seed and the same
 * sequence of calls yield the same ids.  For tests and the simulator.
 */
void cnl_id_gen_init(struct cnl_id_gen *g, uint64_t seed);

/* cnl_id_gen_init_random - a generator drawing from getrandom(). */
void cnl_id_gen_init_random(struct cnl_id_gen *g);

/*
 * cnl_id_new - write a new id with @prefix for the instant @now_ms into
 * @buf.  Returns the length of the id, or: -EINVAL for a prefix that is not
 * 1..CNL_ID_PREFIX_MAX characters of [a-z]; -ERANGE for a time before 1970
 * or past the 48-bit limit (year 10889); -ENOSPC when @len is too small;
 * -EOVERFLOW when 2^80 ids were already made in one millisecond; or the
 * negative errno of getrandom().  On failure @buf and @g are unchanged.
 */
int cnl_id_new(struct cnl_id_gen *g, const char *prefix, int64_t now_ms,
               char *buf, size_t len);

/*
 * cnl_id_parse - validate @id and extract its prefix and timestamp.  The
 * prefix must be 1..CNL_ID_PREFIX_MAX characters of [a-z], followed by '_'
 * and exactly 26 characters of the Crockford alphabet (either case; I, L,
 * O and U are not in it) whose first is 0..7, since a ULID is 128 bits.
 * Either output may be NULL.  Returns 0, -CNL_EPARSE for a malformed id, or
 * -ENOSPC when the prefix does not fit in @plen bytes; outputs are
 * untouched on failure.
 */
int cnl_id_parse(const char *id, char *ret_prefix, size_t plen,
                 int64_t *ret_ms);

#endif /* CNL_ID_H */
