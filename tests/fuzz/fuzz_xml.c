/*
 * fuzz_xml.c - fuzz target for the XML reader of the cloud APIs' answers
 * (server/xml.h): the input is an answer body as EC2 (or something that
 * claims to be it) would send it.  Whatever it is, the reader returns a
 * tree or a refusal, never reads past the input, and a tree it returns
 * holds what it promises: every element named, with its text; the
 * lookups cloud_aws.c makes stay within it.
 *
 * Built with libFuzzer (-DCNL_FUZZ=ON) and with replay.c's main(), as
 * fuzz_http.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Walk the tree without recursion on its depth: a check of each node. */
static void check(const struct cnl_xml *x)
{
	const struct cnl_xml *stack[CNL_XML_DEPTH_MAX + 1];
	int depth = 0;
	size_t nodes = 0;

	stack[depth++] = x;
	while (depth) {
		const struct cnl_xml *n = stack[--depth];

		for (; n; n = n->next) {
			if (!n->name || !n->name[0] || !n->text)
				abort();
			if (++nodes > CNL_XML_NODES_MAX)
				abort();
			if (n->child) {
				if (depth > CNL_XML_DEPTH_MAX)
					abort();
				stack[depth++] = n->child;
			}
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cnl_xml *x = NULL;
	char err[256];

	if (cnl_xml_parse((const char *)data, size, &x, err, sizeof(err)) !=
	    0) {
		if (x || !err[0])
			abort();
		return 0;
	}
	check(x);
	(void)cnl_xml_path(x, "Errors/Error/Code");
	(void)cnl_xml_path(x, "reservationSet/item/instancesSet");
	(void)cnl_xml_child(x, "instancesSet");
	cnl_xml_free(x);
	return 0;
}
