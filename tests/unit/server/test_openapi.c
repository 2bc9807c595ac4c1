/*
 * test_openapi.c - docs/api/openapi.yaml and the route table agree: every
 * row of cnl_api_routes() is documented once, under its path and method,
 * with its permission (x-cnlab-permission), and the document lists no
 * operation the server does not serve.
 *
 * The reader understands the document's own layout (paths at two spaces,
 * methods at four, the permission at six), which the test also checks, so
 * a hand edit that breaks the layout fails here rather than passing
 * unread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "net/http_server.h"
#include "server/api.h"

#define MAX_OPS 512

struct op {
	char method[8];
	char path[160];
	char perm[512];
	int seen;
};

static int read_doc(struct op *ops, int max)
{
	const char *src = getenv("CNL_SOURCE_DIR");
	char file[512], line[512], path[160] = "";
	bool in_paths = false;
	int n = 0;
	FILE *f;

	assert_non_null(src);
	snprintf(file, sizeof(file), "%s/docs/api/openapi.yaml", src);
	f = fopen(file, "r");
	if (!f)
		fail_msg("cannot open %s", file);
	while (fgets(line, sizeof(line), f)) {
		/* A longer line would be read as two, and the second end
		 * the paths section without a word. */
		if (!strchr(line, '\n') && !feof(f))
			fail_msg("docs/api/openapi.yaml: a line of %zu bytes "
			         "or more (split it)",
			         sizeof(line) - 1);
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line, "paths:") == 0) {
			in_paths = true;
			continue;
		}
		if (!in_paths || line[0] == '#' || line[0] == '\0')
			continue;
		if (line[0] != ' ')
			break; /* the next top-level key */
		if (line[2] == '/' && line[strlen(line) - 1] == ':') {
			snprintf(path, sizeof(path), "%.*s",
			         (int)strlen(line) - 3, line + 2);
			continue;
		}
		if (strncmp(line, "    ", 4) == 0 && line[4] != ' ') {
			static const char *const m[] = {"get", "post", "put",
			                                "patch", "delete"};
			for (size_t i = 0; i < 5; i++) {
				size_t k = strlen(m[i]);

				if (strncmp(line + 4, m[i], k) == 0 &&
				    line[4 + k] == ':' && line[5 + k] == '\0') {
					assert_true(n < max);
					assert_true(path[0] != '\0');
					for (size_t c = 0; c < k; c++)
						ops[n].method[c] =
						    (char)(m[i][c] - 32);
					ops[n].method[k] = '\0';
					snprintf(ops[n].path,
					         sizeof(ops[n].path), "%s",
					         path);
					n++;
				}
			}
			continue;
		}
		if (strncmp(line, "      x-cnlab-permission: ", 26) == 0) {
			assert_true(n > 0);
			snprintf(ops[n - 1].perm, sizeof(ops[n - 1].perm), "%s",
			         line + 26);
		}
	}
	fclose(f);
	return n;
}

static void test_doc_matches_route_table(void **state)
{
	static struct op ops[MAX_OPS];
	const struct cnl_http_route *rt;
	size_t nroutes;
	int n = read_doc(ops, MAX_OPS);

	rt = cnl_api_routes(&nroutes);
	assert_true(n > 0);
	for (size_t i = 0; i < nroutes; i++) {
		int found = 0;

		for (int k = 0; k < n; k++) {
			if (strcmp(ops[k].method, rt[i].method) != 0 ||
			    strcmp(ops[k].path, rt[i].pattern) != 0)
				continue;
			found++;
			ops[k].seen++;
			if (strcmp(ops[k].perm,
			           cnl_http_perm_name(rt[i].perm)) != 0)
				fail_msg("%s %s: the document says permission "
				         "\"%s\", the route table %s",
				         rt[i].method, rt[i].pattern,
				         ops[k].perm,
				         cnl_http_perm_name(rt[i].perm));
		}
		if (found != 1)
			fail_msg("%s %s is in the route table but documented "
			         "%d times in docs/api/openapi.yaml",
			         rt[i].method, rt[i].pattern, found);
	}
	for (int k = 0; k < n; k++)
		if (ops[k].seen != 1)
			fail_msg("docs/api/openapi.yaml documents %s %s, which "
			         "the server does not serve",
			         ops[k].method, ops[k].path);
	assert_int_equal((size_t)n, nroutes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_doc_matches_route_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
