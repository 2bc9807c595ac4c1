/*
 * store-internal.h - what every backend of the store shares and callers
 * never see: the audit chain's hash (audit_chain.c).  Included only by
 * src/store/ files.
 */
#ifndef CNL_STORE_INTERNAL_H
#define CNL_STORE_INTERNAL_H

#include "store/store.h"

/* The prev_hash of the first record. */
#define CNL_STORE_ZERO_HASH \
	"0000000000000000000000000000000000000000000000000000000000000000"

/*
 * cnl_store_audit_hash - the hash of @a (its seq, ts_ms and four texts)
 * chained to @prev_hash, as 64 lowercase hex digits in @hex.  0, or -EIO
 * when the text does not fit (a field longer than store.h allows) or
 * the digest fails.
 */
int cnl_store_audit_hash(const struct cnl_store_audit *a, const char *prev_hash,
                         char hex[CNL_STORE_SHA256_HEX]);

#endif /* CNL_STORE_INTERNAL_H */
