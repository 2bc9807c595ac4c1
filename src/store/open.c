/*
 * open.c - cnl_store_open(): the backend a store URL names.  A file of its
 * own, above every backend: store.c's wrappers are called by the backends'
 * files (cnl_store_docs_done), so the choice between backends cannot live
 * there without a cycle between files.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "store/store.h"

/* A libpq key=value string ("host=db port=5432 dbname=cnlab"): it
 * starts with one of libpq's keywords and '='. */
static bool conninfo(const char *s)
{
	static const char *const keys[] = {
	    "host=", "hostaddr=", "port=",    "dbname=",
	    "user=", "password=", "service=", "sslmode="};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strncmp(s, keys[i], strlen(keys[i])) == 0)
			return true;
	return false;
}

int cnl_store_open(const char *url, struct cnl_store **ret, char *err,
                   size_t errlen)
{
	const char *colon;

	if (!url || !ret)
		return -EINVAL;
	if (strncmp(url, "postgresql://", 13) == 0 ||
	    strncmp(url, "postgres://", 11) == 0 || conninfo(url))
		return cnl_store_open_postgres(url, ret, err, errlen);
	if (strncmp(url, "sqlite://", 9) == 0)
		return cnl_store_open_sqlite(url + 9, ret, err, errlen);
	if (strncmp(url, "sqlite:", 7) == 0 && url[7] != '\0')
		return cnl_store_open_sqlite(url + 7, ret, err, errlen);
	/* A plain path; a word and a colon before any slash is a scheme
	 * this build does not know. */
	colon = strchr(url, ':');
	if (colon && colon > url && !memchr(url, '/', (size_t)(colon - url)) &&
	    strcmp(url, ":memory:") != 0) {
		cnl_seterr(err, errlen,
		           "unknown store \"%.*s:\": use sqlite:///path/to/"
		           "cnlab.db or postgresql://user@host/db",
		           (int)(colon - url), url);
		return -CNL_ECONFIG;
	}
	if (!url[0]) {
		cnl_seterr(err, errlen, "the store's URL is empty");
		return -CNL_ECONFIG;
	}
	return cnl_store_open_sqlite(url, ret, err, errlen);
}
