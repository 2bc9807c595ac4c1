/*
 * test_label.c - the label rule: what a dataset may be called.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "common/label.h"

static void test_label_valid(void **state)
{
	char longest[CNL_LABEL_MAX], too_long[CNL_LABEL_MAX + 1];

	(void)state;
	assert_true(cnl_label_valid("imagenet"));
	assert_true(cnl_label_valid("ImageNet-1k_v2.0"));
	assert_true(cnl_label_valid("9"));
	memset(longest, 'a', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	assert_true(cnl_label_valid(longest));
	memset(too_long, 'a', sizeof(too_long) - 1);
	too_long[sizeof(too_long) - 1] = '\0';
	assert_false(cnl_label_valid(too_long));
	assert_false(cnl_label_valid(NULL));
	assert_false(cnl_label_valid(""));
	assert_false(cnl_label_valid(".hidden"));
	assert_false(cnl_label_valid("-flag"));
	assert_false(cnl_label_valid("a,b"));
	assert_false(cnl_label_valid("a b"));
	assert_false(cnl_label_valid("a/b"));
	assert_false(cnl_label_valid("caf\xc3\xa9"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_label_valid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
