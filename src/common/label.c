/*
 * label.c - the label rule (see label.h).
 */
#include <string.h>

#include "common/label.h"

bool cnl_label_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n >= CNL_LABEL_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		      ch == '-'))
			return false;
	}
	return true;
}
