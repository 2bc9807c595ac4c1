/*
 * tar.h - a streaming reader of tar archives (POSIX ustar, pax extended
 * headers, GNU long names): bytes go in as they arrive, in chunks of any
 * size, and each entry comes out through callbacks, its data in pieces,
 * never held whole.  For OCI image archives (`cnlab image import`), whose
 * blobs may be gigabytes.
 *
 * What it checks: every header's checksum, octal (or base-256) numbers,
 * a name that fits, and that the archive ends where a header would start
 * (two zero blocks, or plain end of input at a block boundary).  What it
 * leaves to the caller: what the names mean and which types it accepts.
 * An error names the entry and what is wrong in @err.
 */
#ifndef CNL_COMMON_TAR_H
#define CNL_COMMON_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CNL_TAR_PATH_MAX 1024
#define CNL_TAR_ERR_MAX  256

struct cnl_tar_entry {
	char path[CNL_TAR_PATH_MAX]; /* as written, pax/GNU long name applied */
	char type;                   /* '0' regular ('\0' and '7' become '0'),
	                                '5' folder, '2' link, '1' hard link... */
	uint64_t size;               /* bytes of data that follow */
};

/* Each returns 0, or a negative value that stops the reader (it then
 * returns that value; the callback writes its reason with cnl_tar_fail). */
struct cnl_tar_ops {
	int (*begin)(void *ud, const struct cnl_tar_entry *e);
	int (*data)(void *ud, const char *p, size_t n);
	int (*end)(void *ud);
};

struct cnl_tar {
	const struct cnl_tar_ops *ops;
	void *ud;
	/* Private. */
	unsigned char block[512];
	size_t have;    /* bytes of the block gathered */
	uint64_t left;  /* of the entry's data */
	uint64_t pad;   /* to the next block */
	int state;      /* header, data, meta (pax/GNU data), done */
	char meta_type; /* 'x', 'g', 'L' while gathering meta */
	char *meta;     /* its bytes (at most 64 KiB) */
	size_t meta_len;
	char next_path[CNL_TAR_PATH_MAX]; /* from a pax or GNU header */
	uint64_t next_size;
	bool has_next_size;
	int zeros; /* zero blocks in a row */
	bool failed;
	struct cnl_tar_entry e;
	char err[CNL_TAR_ERR_MAX];
};

void cnl_tar_init(struct cnl_tar *t, const struct cnl_tar_ops *ops, void *ud);

/* cnl_tar_feed - @n more bytes.  0, or negative with @t->err set; after an
 * error the reader takes nothing more. */
int cnl_tar_feed(struct cnl_tar *t, const char *p, size_t n);

/* cnl_tar_finish - the input ended: 0 when the archive ended cleanly,
 * else -CNL_EPARSE with @t->err ("truncated in the data of X"). */
int cnl_tar_finish(struct cnl_tar *t);

/* Set @t->err (printf-like) and return -CNL_EPARSE: for callbacks. */
int cnl_tar_fail(struct cnl_tar *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void cnl_tar_done(struct cnl_tar *t);

#endif /* CNL_COMMON_TAR_H */
