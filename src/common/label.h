/*
 * label.h - the names users and operators give to data and to places: a
 * job's dataset, the datasets a node holds.
 *
 * A label is 1..63 characters of A-Z a-z 0-9 . _ -, not starting with '.'
 * or '-': the rule the API uses for every name, so that a label is safe
 * unquoted in a URL, a file name, an environment variable and a comma-
 * separated list, and an agent, cnlabd and the CLI all accept the same
 * ones.  Comparisons are exact (case matters), as the scheduler's are.
 */
#ifndef CNL_LABEL_H
#define CNL_LABEL_H

#include <stdbool.h>

/* Longest label, NUL included. */
#define CNL_LABEL_MAX 64

/* cnl_label_valid - whether @s (may be NULL: no) is a label. */
bool cnl_label_valid(const char *s);

#endif /* CNL_LABEL_H */
