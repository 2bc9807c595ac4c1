/*
 * tar.c - the streaming tar reader of tar.h.
 *
 * One 512-byte block is gathered at a time for headers; an entry's data
 * passes straight from the caller's buffer to the data callback, then the
 * padding to the next block is skipped.  A pax extended header ('x') or a
 * GNU long name ('L') is gathered (at most META_MAX bytes) and applies to
 * the entry that follows; a global pax header ('g') and a GNU long link
 * name ('K') are read and dropped.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/tar.h"
#include "common/util.h"

#define META_MAX (64 * 1024)

enum { ST_HEADER, ST_DATA, ST_PAD, ST_META, ST_DONE };

void cnl_tar_init(struct cnl_tar *t, const struct cnl_tar_ops *ops, void *ud)
{
	memset(t, 0, sizeof(*t));
	t->ops = ops;
	t->ud = ud;
}

void cnl_tar_done(struct cnl_tar *t)
{
	free(t->meta);
	t->meta = NULL;
}

int cnl_tar_fail(struct cnl_tar *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->err, sizeof(t->err), fmt, ap);
	va_end(ap);
	t->failed = true;
	return -CNL_EPARSE;
}

/* An octal field (NUL- or space-terminated, leading spaces allowed), or a
 * base-256 one (first byte's high bit set); -1 when it is neither. */
static int number(const unsigned char *f, size_t n, uint64_t *ret)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		if (f[0] != 0x80)
			return -1; /* negative, or too large for 64 bits */
		for (i = 1; i < n; i++) {
			if (v >> 56)
				return -1;
			v = v << 8 | f[i];
		}
		*ret = v;
		return 0;
	}
	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 61)
			return -1;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	if (i < n && f[i] != '\0' && f[i] != ' ')
		return -1;
	*ret = v;
	return 0;
}

/* A fixed-size name field as a string. */
static void field(const unsigned char *f, size_t n, char *out)
{
	size_t len = strnlen((const char *)f, n);

	memcpy(out, f, len);
	out[len] = '\0';
}

/* The records of a pax header: "LEN key=value\n"; path and size kept. */
static int pax(struct cnl_tar *t)
{
	size_t o = 0;

	while (o < t->meta_len) {
		char *rec = t->meta + o, *end, *eq;
		unsigned long len = strtoul(rec, &end, 10);

		if (end == rec || *end != ' ' || len < 5 ||
		    len > t->meta_len - o || rec[len - 1] != '\n')
			return cnl_tar_fail(t, "a pax header is malformed");
		rec[len - 1] = '\0';
		eq = strchr(end + 1, '=');
		if (!eq)
			return cnl_tar_fail(t, "a pax record has no '='");
		*eq = '\0';
		if (strcmp(end + 1, "path") == 0) {
			if (strlen(eq + 1) >= sizeof(t->next_path))
				return cnl_tar_fail(t,
				                    "a path is over %d bytes",
				                    CNL_TAR_PATH_MAX - 1);
			snprintf(t->next_path, sizeof(t->next_path), "%s",
			         eq + 1);
		} else if (strcmp(end + 1, "size") == 0) {
			char *e2;

			errno = 0;
			t->next_size = strtoull(eq + 1, &e2, 10);
			if (errno || e2 == eq + 1 || *e2 || eq[1] < '0' ||
			    eq[1] > '9')
				return cnl_tar_fail(t, "a pax size is not a "
				                       "number");
			t->has_next_size = true;
		}
		o += len;
	}
	return 0;
}

static int meta_end(struct cnl_tar *t)
{
	int r = 0;

	if (t->meta_type == 'x') {
		r = pax(t);
	} else if (t->meta_type == 'L') {
		size_t len = strnlen(t->meta, t->meta_len);

		if (len >= sizeof(t->next_path))
			return cnl_tar_fail(t, "a path is over %d bytes",
			                    CNL_TAR_PATH_MAX - 1);
		memcpy(t->next_path, t->meta, len);
		t->next_path[len] = '\0';
	}
	t->meta_len = 0;
	return r;
}

static int header(struct cnl_tar *t)
{
	const unsigned char *b = t->block;
	uint64_t sum = 0, want, size;
	long ssum = 0;
	char name[101], prefix[156];
	bool zero = true;

	for (int i = 0; i < 512 && zero; i++)
		zero = b[i] == 0;
	if (zero) {
		if (++t->zeros == 2)
			t->state = ST_DONE;
		return 0;
	}
	if (t->zeros)
		return cnl_tar_fail(t, "a header follows an end-of-archive "
		                       "block");
	for (int i = 0; i < 512; i++) {
		unsigned char c = i >= 148 && i < 156 ? ' ' : b[i];

		sum += c;
		ssum += (signed char)c;
	}
	if (number(b + 148, 8, &want) < 0 ||
	    (want != sum && (long)want != ssum))
		return cnl_tar_fail(t, "not a tar archive (a header's "
		                       "checksum is wrong)");
	if (number(b + 124, 12, &size) < 0)
		return cnl_tar_fail(t, "a header's size is not a number");
	field(b, 100, name);
	prefix[0] = '\0';
	if (memcmp(b + 257, "ustar", 5) == 0)
		field(b + 345, 155, prefix);
	t->e.type = (char)b[156];
	if (t->e.type == '\0' || t->e.type == '7')
		t->e.type = '0';
	if (t->e.type == 'x' || t->e.type == 'g' || t->e.type == 'L' ||
	    t->e.type == 'K') {
		if (size > META_MAX)
			return cnl_tar_fail(t,
			                    "an extended header of %llu "
			                    "bytes (at most %d)",
			                    (unsigned long long)size, META_MAX);
		t->meta_type =
		    t->e.type == 'x' || t->e.type == 'L' ? t->e.type : 0;
		if (!t->meta)
			t->meta = cnl_xmalloc(META_MAX + 1);
		t->meta_len = 0;
		t->left = size;
		t->pad = (512 - size % 512) % 512;
		t->state = ST_META;
		if (size == 0) {
			t->state = ST_HEADER;
			return meta_end(t);
		}
		return 0;
	}
	if (t->next_path[0]) {
		snprintf(t->e.path, sizeof(t->e.path), "%s", t->next_path);
	} else {
		snprintf(t->e.path, sizeof(t->e.path), "%s%s%s", prefix,
		         prefix[0] ? "/" : "", name);
	}
	t->e.size = t->has_next_size ? t->next_size : size;
	t->next_path[0] = '\0';
	t->has_next_size = false;
	/* Folders and links carry no data, whatever the header says. */
	if (t->e.type == '5' || t->e.type == '1' || t->e.type == '2')
		t->e.size = 0;
	if (!t->e.path[0])
		return cnl_tar_fail(t, "an entry has no name");
	if (t->ops->begin) {
		int r = t->ops->begin(t->ud, &t->e);

		if (r < 0)
			return r;
	}
	t->left = t->e.size;
	t->pad = (512 - t->e.size % 512) % 512;
	t->state = ST_DATA;
	if (t->left == 0) {
		t->state = ST_PAD;
		if (t->ops->end)
			return t->ops->end(t->ud);
	}
	return 0;
}

int cnl_tar_feed(struct cnl_tar *t, const char *p, size_t n)
{
	int r = 0;

	if (t->failed)
		return -CNL_EPARSE;
	while (n > 0 && r == 0) {
		size_t k;

		switch (t->state) {
		case ST_HEADER:
			k = CNL_MIN(n, 512 - t->have);
			memcpy(t->block + t->have, p, k);
			t->have += k;
			if (t->have == 512) {
				t->have = 0;
				r = header(t);
			}
			break;
		case ST_DATA:
			k = (size_t)CNL_MIN((uint64_t)n, t->left);
			if (t->ops->data && (r = t->ops->data(t->ud, p, k)) < 0)
				break;
			t->left -= k;
			if (t->left == 0) {
				t->state = ST_PAD;
				if (t->ops->end)
					r = t->ops->end(t->ud);
			}
			break;
		case ST_META:
			k = (size_t)CNL_MIN((uint64_t)n, t->left);
			memcpy(t->meta + t->meta_len, p, k);
			t->meta_len += k;
			t->left -= k;
			if (t->left == 0) {
				t->meta[t->meta_len] = '\0';
				t->state = ST_PAD;
				r = meta_end(t);
			}
			break;
		case ST_PAD:
			k = (size_t)CNL_MIN((uint64_t)n, t->pad);
			t->pad -= k;
			if (t->pad == 0)
				t->state = ST_HEADER;
			break;
		default: /* ST_DONE: what follows the end is ignored */
			k = n;
			break;
		}
		p += k;
		n -= k;
	}
	if (r < 0) {
		t->failed = true;
		if (!t->err[0])
			snprintf(t->err, sizeof(t->err), "%s", cnl_strerror(r));
	}
	return r;
}

int cnl_tar_finish(struct cnl_tar *t)
{
	if (t->failed)
		return -CNL_EPARSE;
	if (t->state == ST_DONE || (t->state == ST_HEADER && t->have == 0 &&
	                            !t->meta_len && !t->next_path[0]))
		return 0;
	if (t->state == ST_PAD && t->pad == 0 && !t->next_path[0])
		return 0;
	if (!t->e.path[0])
		return cnl_tar_fail(t, "not a tar archive (it ends before its "
		                       "first entry)");
	if (t->state == ST_DATA || t->state == ST_PAD)
		return cnl_tar_fail(t, "the archive is truncated in \"%s\"",
		                    t->e.path);
	return cnl_tar_fail(t, "the archive is truncated");
}
