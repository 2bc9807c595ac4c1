/*
 * xml.h - a small, strict XML reader for the answers of cloud APIs (EC2's
 * Query API answers in XML: cloud_aws.c).
 *
 * It reads a document into a tree of elements, each with its name (any
 * namespace prefix kept), its text (the character data directly inside
 * it, entities decoded) and its children in order.  Attributes are
 * skipped (EC2 puts nothing in them that we read).  What it refuses,
 * with an error naming the byte: a DOCTYPE or entity declaration (no
 * external entity is ever fetched, no entity expands into more than its
 * character), an unknown entity, an end tag that does not match, text
 * outside the root, a second root, nesting deeper than CNL_XML_DEPTH_MAX,
 * more than CNL_XML_NODES_MAX elements.  Comments, processing
 * instructions and the XML declaration are skipped; CDATA sections are
 * text.
 */
#ifndef CNL_SERVER_XML_H
#define CNL_SERVER_XML_H

#include <stddef.h>

#define CNL_XML_DEPTH_MAX 64
#define CNL_XML_NODES_MAX 100000

struct cnl_xml {
	char *name;
	char *text;            /* "" when none */
	struct cnl_xml *child; /* the first child */
	struct cnl_xml *next;  /* the next sibling */
};

/*
 * cnl_xml_parse - the document of @len bytes at @s into *@ret (free with
 * cnl_xml_free()).  0, or -EINVAL with @err naming what and where.
 */
int cnl_xml_parse(const char *s, size_t len, struct cnl_xml **ret, char *err,
                  size_t errlen);

void cnl_xml_free(struct cnl_xml *x);

/* The first child of @x named @name, or NULL (@x may be NULL). */
const struct cnl_xml *cnl_xml_child(const struct cnl_xml *x, const char *name);

/* The text of the element at @path below @x ("instanceState/name"), or
 * NULL when one of its steps is missing. */
const char *cnl_xml_path(const struct cnl_xml *x, const char *path);

#endif
