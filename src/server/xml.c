/*
 * xml.c - the small, strict XML reader of xml.h: one pass over the bytes
 * with an explicit stack of open elements (no recursion on untrusted
 * depth), text appended to the innermost open element.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fs.h"
#include "common/util.h"
#include "server/xml.h"

struct text {
	char *p;
	size_t len, cap;
};

static void text_add(struct text *t, const char *s, size_t n)
{
	if (t->len + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 32;

		while (cap < t->len + n + 1)
			cap *= 2;
		t->p = cnl_xrealloc(t->p, cap);
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
	t->p[t->len] = '\0';
}

void cnl_xml_free(struct cnl_xml *x)
{
	/* Iterative: children spliced into the sibling chain as we go. */
	while (x) {
		struct cnl_xml *next;

		if (x->child) {
			struct cnl_xml *last = x->child;

			while (last->next)
				last = last->next;
			last->next = x->next;
			x->next = x->child;
			x->child = NULL;
		}
		next = x->next;
		free(x->name);
		free(x->text);
		free(x);
		x = next;
	}
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' ||
	       c == ':' || (unsigned char)c >= 0x80;
}

/* Append the UTF-8 of @cp to @t; false for a code point XML forbids. */
static bool add_utf8(struct text *t, unsigned long cp)
{
	char b[4];

	/* XML 1.0's Char: no C0 control but tab, LF and CR. */
	if ((cp < 0x20 && cp != 0x9 && cp != 0xa && cp != 0xd) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe || cp == 0xffff ||
	    cp > 0x10ffff)
		return false;
	if (cp < 0x80) {
		b[0] = (char)cp;
		text_add(t, b, 1);
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | cp >> 6);
		b[1] = (char)(0x80 | (cp & 0x3f));
		text_add(t, b, 2);
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | cp >> 12);
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		text_add(t, b, 3);
	} else {
		b[0] = (char)(0xf0 | cp >> 18);
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		text_add(t, b, 4);
	}
	return true;
}

/* The entity at @s (after "&", up to @end) into @t; its length through
 * ";", or 0 when it is not one of the five or a character reference. */
static size_t entity(const char *s, const char *end, struct text *t)
{
	static const struct {
		const char *name;
		char c;
	} known[] = {{"lt;", '<'},
	             {"gt;", '>'},
	             {"amp;", '&'},
	             {"quot;", '"'},
	             {"apos;", '\''}};
	size_t room = (size_t)(end - s);

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		size_t n = strlen(known[i].name);

		if (room >= n && memcmp(s, known[i].name, n) == 0) {
			text_add(t, &known[i].c, 1);
			return n;
		}
	}
	if (room >= 3 && s[0] == '#') {
		bool hex = s[1] == 'x';
		unsigned long cp = 0;
		size_t i = hex ? 2 : 1, digits = 0;

		for (; i < room && s[i] != ';' && digits < 8; i++, digits++) {
			char c = s[i];
			int v = hex                    ? cnl_hex_digit(c)
			        : c >= '0' && c <= '9' ? c - '0'
			                               : -1;

			if (v < 0)
				return 0;
			cp = cp * (hex ? 16 : 10) + (unsigned long)v;
		}
		if (!digits || i >= room || s[i] != ';' || !add_utf8(t, cp))
			return 0;
		return i + 1;
	}
	return 0;
}

#define FAIL(...)                                     \
	do {                                          \
		cnl_seterr(err, errlen, __VA_ARGS__); \
		goto fail;                            \
	} while (0)

int cnl_xml_parse(const char *s, size_t len, struct cnl_xml **ret, char *err,
                  size_t errlen)
{
	struct cnl_xml *stack[CNL_XML_DEPTH_MAX], *root = NULL;
	struct cnl_xml *last[CNL_XML_DEPTH_MAX]; /* each one's last child */
	struct text tx[CNL_XML_DEPTH_MAX];
	const char *p = s, *end = s + len;
	size_t depth = 0, nodes = 0;

	memset(tx, 0, sizeof(tx));
	while (p < end) {
		if (*p != '<') {
			if (depth == 0) {
				if (*p != ' ' && *p != '\t' && *p != '\r' &&
				    *p != '\n')
					FAIL("text outside the root element at "
					     "byte %zu",
					     (size_t)(p - s));
				p++;
				continue;
			}
			if (*p == '&') {
				size_t n = entity(p + 1, end, &tx[depth - 1]);

				if (!n)
					FAIL("unknown or bad entity at byte "
					     "%zu",
					     (size_t)(p - s));
				p += 1 + n;
				continue;
			}
			if (*p == '\0')
				FAIL("a NUL byte at %zu", (size_t)(p - s));
			text_add(&tx[depth - 1], p, 1);
			p++;
			continue;
		}
		if (end - p >= 4 && memcmp(p, "<!--", 4) == 0) {
			const char *e =
			    memmem(p + 4, (size_t)(end - p - 4), "-->", 3);

			if (!e)
				FAIL("unterminated comment at byte %zu",
				     (size_t)(p - s));
			p = e + 3;
			continue;
		}
		if (end - p >= 9 && memcmp(p, "<![CDATA[", 9) == 0) {
			const char *e =
			    memmem(p + 9, (size_t)(end - p - 9), "]]>", 3);

			if (!e || depth == 0 ||
			    memchr(p + 9, '\0', (size_t)(e - p - 9)))
				FAIL("bad CDATA section at byte %zu",
				     (size_t)(p - s));
			text_add(&tx[depth - 1], p + 9, (size_t)(e - p - 9));
			p = e + 3;
			continue;
		}
		if (end - p >= 2 && p[1] == '!')
			FAIL("a DOCTYPE or declaration at byte %zu (refused)",
			     (size_t)(p - s));
		if (end - p >= 2 && p[1] == '?') {
			const char *e =
			    memmem(p + 2, (size_t)(end - p - 2), "?>", 2);

			if (!e)
				FAIL("unterminated processing instruction at "
				     "byte %zu",
				     (size_t)(p - s));
			p = e + 2;
			continue;
		}
		if (end - p >= 2 && p[1] == '/') {
			const char *n = p + 2, *q = n;
			struct cnl_xml *top;

			while (q < end && name_char(*q))
				q++;
			top = depth ? stack[depth - 1] : NULL;
			if (!top || (size_t)(q - n) != strlen(top->name) ||
			    memcmp(n, top->name, (size_t)(q - n)) != 0)
				FAIL("end tag that does not match at byte %zu",
				     (size_t)(p - s));
			while (q < end && (*q == ' ' || *q == '\t' ||
			                   *q == '\r' || *q == '\n'))
				q++;
			if (q >= end || *q != '>')
				FAIL("bad end tag at byte %zu",
				     (size_t)(p - s));
			top->text =
			    tx[depth - 1].p ? tx[depth - 1].p : cnl_xstrdup("");
			tx[depth - 1] = (struct text){0};
			depth--;
			p = q + 1;
			continue;
		}
		{
			const char *n = p + 1, *q = n;
			struct cnl_xml *x;
			bool empty = false;
			char quote = 0;

			while (q < end && name_char(*q))
				q++;
			if (q == n)
				FAIL("bad tag at byte %zu", (size_t)(p - s));
			if (depth == 0 && root)
				FAIL("a second root element at byte %zu",
				     (size_t)(p - s));
			if (depth == CNL_XML_DEPTH_MAX)
				FAIL("nested deeper than %d at byte %zu",
				     CNL_XML_DEPTH_MAX, (size_t)(p - s));
			if (++nodes > CNL_XML_NODES_MAX)
				FAIL("more than %d elements",
				     CNL_XML_NODES_MAX);
			x = cnl_xcalloc(1, sizeof(*x));
			x->name = cnl_xmalloc((size_t)(q - n) + 1);
			memcpy(x->name, n, (size_t)(q - n));
			x->name[q - n] = '\0';
			if (depth == 0) {
				root = x;
			} else {
				if (last[depth - 1])
					last[depth - 1]->next = x;
				else
					stack[depth - 1]->child = x;
				last[depth - 1] = x;
			}
			/* Attributes: skipped, quotes respected; a "<"
			 * outside quotes ends it as unterminated. */
			for (; q < end; q++) {
				if (quote) {
					if (*q == quote)
						quote = 0;
					continue;
				}
				if (*q == '"' || *q == '\'')
					quote = *q;
				else if (*q == '>' || *q == '<')
					break;
			}
			if (q >= end || *q == '<')
				FAIL("unterminated tag at byte %zu",
				     (size_t)(p - s));
			empty = q[-1] == '/';
			if (empty) {
				x->text = cnl_xstrdup("");
			} else {
				stack[depth] = x;
				last[depth] = NULL;
				tx[depth] = (struct text){0};
				depth++;
			}
			p = q + 1;
		}
	}
	if (!root || depth)
		FAIL("%s", root ? "unterminated element at the end"
		                : "no root element");
	*ret = root;
	return 0;
fail:
	for (size_t i = 0; i < depth; i++)
		free(tx[i].p);
	cnl_xml_free(root);
	return -EINVAL;
}

const struct cnl_xml *cnl_xml_child(const struct cnl_xml *x, const char *name)
{
	for (const struct cnl_xml *c = x ? x->child : NULL; c; c = c->next)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

const char *cnl_xml_path(const struct cnl_xml *x, const char *path)
{
	char step[128];

	while (x && *path) {
		size_t n = strcspn(path, "/");

		if (n >= sizeof(step))
			return NULL;
		memcpy(step, path, n);
		step[n] = '\0';
		x = cnl_xml_child(x, step);
		path += n;
		if (*path == '/')
			path++;
	}
	return x ? x->text : NULL;
}
