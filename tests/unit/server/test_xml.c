/*
 * test_xml.c - the strict XML reader of the cloud APIs' answers
 * (server/xml.h): an EC2-shaped document read into its tree, entities and
 * CDATA decoded, attributes skipped; and what it refuses: DOCTYPE and
 * entity declarations (no entity expansion attack), unknown entities,
 * mismatched or unterminated tags, two roots, text outside the root,
 * nesting past the limit.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/xml.h"

static struct cnl_xml *parse(const char *s)
{
	struct cnl_xml *x = NULL;
	char err[256] = "";

	if (cnl_xml_parse(s, strlen(s), &x, err, sizeof(err)) != 0)
		fail_msg("refused: %s: %s", err, s);
	return x;
}

static void refused(const char *s, const char *why)
{
	struct cnl_xml *x = NULL;
	char err[256] = "";

	if (cnl_xml_parse(s, strlen(s), &x, err, sizeof(err)) != -EINVAL)
		fail_msg("accepted: %s", s);
	assert_null(x);
	if (!strstr(err, why))
		fail_msg("error \"%s\" does not say \"%s\"", err, why);
}

static void test_ec2_shape(void **state)
{
	struct cnl_xml *x =
	    parse("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	          "<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/"
	          "doc/2016-11-15/\">\n"
	          "  <requestId>8f7724cf-496f</requestId>\n"
	          "  <!-- a comment -->\n"
	          "  <reservationSet>\n"
	          "    <item><instancesSet>\n"
	          "      <item><instanceId>i-1</instanceId>"
	          "<instanceState><code>16</code><name>running</name>"
	          "</instanceState><tagSet/></item>\n"
	          "      <item><instanceId>i-2</instanceId></item>\n"
	          "    </instancesSet></item>\n"
	          "  </reservationSet>\n"
	          "</DescribeInstancesResponse>\n");
	const struct cnl_xml *set, *it;
	int n = 0;

	(void)state;
	assert_string_equal(x->name, "DescribeInstancesResponse");
	assert_string_equal(cnl_xml_path(x, "requestId"), "8f7724cf-496f");
	set = cnl_xml_child(
	    cnl_xml_child(cnl_xml_child(x, "reservationSet"), "item"),
	    "instancesSet");
	assert_non_null(set);
	for (it = set->child; it; it = it->next)
		n++;
	assert_int_equal(n, 2);
	assert_string_equal(cnl_xml_path(set->child, "instanceState/name"),
	                    "running");
	assert_string_equal(cnl_xml_path(set->child, "tagSet"), "");
	assert_string_equal(cnl_xml_path(set->child->next, "instanceId"),
	                    "i-2");
	assert_null(cnl_xml_path(set->child->next, "instanceState/name"));
	assert_null(cnl_xml_path(x, "nothing/here"));
	cnl_xml_free(x);
}

static void test_text(void **state)
{
	struct cnl_xml *x = parse("<a k='v>' j=\"<\">x &lt;&gt;&amp;&quot;"
	                          "&apos; &#65;&#x42;&#x20AC; "
	                          "<![CDATA[<raw & text>]]></a>");

	(void)state;
	assert_string_equal(x->text, "x <>&\"' AB\xe2\x82\xac <raw & text>");
	cnl_xml_free(x);
}

static void test_refusals(void **state)
{
	char deep[CNL_XML_DEPTH_MAX * 8 + 64];
	size_t n = 0;

	(void)state;
	refused("<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>", "DOCTYPE");
	refused("<a>&x;</a>", "entity");
	refused("<a>&#0;</a>", "entity");
	refused("<a>&#xD800;</a>", "entity");
	refused("<a>&amp</a>", "entity");
	refused("<a><b></a></b>", "does not match");
	refused("<a><b>", "unterminated");
	refused("<a></a><b></b>", "second root");
	refused("x<a></a>", "outside");
	refused("<a", "unterminated");
	refused("", "no root");
	refused("<a><!-- open </a>", "comment");
	refused("<a x<", "unterminated");
	refused("<a>&#1;</a>", "entity");
	refused("<a>&#xFFFE;</a>", "entity");
	{
		static const char cdata_nul[] = "<a>X<![CDATA[\0]]>Y</a>";
		struct cnl_xml *x = NULL;
		char err[256] = "";

		assert_int_equal(cnl_xml_parse(cdata_nul, sizeof(cdata_nul) - 1,
		                               &x, err, sizeof(err)),
		                 -EINVAL);
		assert_non_null(strstr(err, "CDATA"));
	}
	for (int i = 0; i <= CNL_XML_DEPTH_MAX; i++)
		n += (size_t)snprintf(deep + n, sizeof(deep) - n, "<d>");
	refused(deep, "deeper");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ec2_shape),
	    cmocka_unit_test(test_text),
	    cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
