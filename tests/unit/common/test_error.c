/*
 * test_error.c - every CNL_E* code and common errno values have a message
 * and a name; unknown codes degrade to "unknown error".
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"

static void test_every_code_explained(void **state)
{
	(void)state;
	for (int c = CNL_EBASE + 1; c < CNL_ELAST_; c++) {
		const char *msg = cnl_strerror(-c);
		const char *name = cnl_errname(-c);
		assert_non_null(msg);
		assert_string_not_equal(msg, "unknown error");
		assert_true(strncmp(name, "CNL_E", 5) == 0);
	}
	assert_string_equal(cnl_errname(-CNL_ENOSPACE), "CNL_ENOSPACE");
	assert_string_equal(cnl_strerror(-CNL_EBLOCKS),
	                    "block count out of range (1..100)");
}

static void test_errno_and_unknown(void **state)
{
	(void)state;
	assert_string_equal(cnl_strerror(0), "success");
	assert_string_equal(cnl_errname(-ENOMEM), "ENOMEM");
	assert_string_equal(cnl_strerror(-ENOMEM), "Cannot allocate memory");
	assert_string_equal(cnl_strerror(-(CNL_ELAST_ + 5)), "unknown error");
	assert_string_equal(cnl_strerror(-CNL_EBASE), "unknown error");
	assert_string_equal(cnl_errname(-999999), "UNKNOWN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_code_explained),
	    cmocka_unit_test(test_errno_and_unknown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
