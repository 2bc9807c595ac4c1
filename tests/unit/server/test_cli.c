/*
 * test_cli.c - the catalog behind GET /cli (api_cli.h) without a server:
 * which names may be served, which Host headers and public_url values may
 * be written into the installer, which files of a cli_dir are published
 * (plain files with a valid name only; no links, folders or other names),
 * their SHA-256 sums against known vectors, and the settings the script
 * starts with.  tests/integration/installer.sh runs the script itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "server/api_cli.h"

/* SHA-256 of "abc" (FIPS 180-2) and of nothing. */
#define SHA_ABC \
	"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_EMPTY \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void test_names(void **state)
{
	static const char *const good[] = {"cnlab-linux-x86_64",
	                                   "cnlab-darwin-aarch64", "cnlab-a-b",
	                                   "cnlab-freebsd13-riscv64"};
	static const char *const bad[] = {
	    "",
	    "cnlab",
	    "cnlab-",
	    "cnlab-linux",
	    "cnlab-linux-",
	    "cnlab--x86_64",
	    "cnlab-Linux-x86_64",
	    "cnlab-linux-x86_64.bak",
	    "cnlab-linux-x86-64",
	    "cnlab-lin_ux-x86_64",
	    "cnlab-linux-../x",
	    "cnlab-linux-x86_64/",
	    "..",
	    "../cnlab-linux-x86_64",
	    "SHA256SUMS",
	    "xcnlab-linux-x86_64",
	    "cnlab-linux-x86_64 ",
	    "cnlab-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-x"};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (!cnl_api_cli_valid_name(good[i]))
			fail_msg("refused the name \"%s\"", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cnl_api_cli_valid_name(bad[i]))
			fail_msg("accepted the name \"%s\"", bad[i]);
	assert_false(cnl_api_cli_valid_name(NULL));
}

static void test_hosts(void **state)
{
	static const char *const good[] = {
	    "127.0.0.1:8080", "localhost",  "cnlab.example.org",
	    "gpu-01.lab:443", "[::1]:8080", "[fe80::1]"};
	static const char *const bad[] = {
	    "",     "a b",    "a'b",      "a\"b", "a;b", "$(id)",
	    "`id`", "a:",     "a:123456", "a:8o", "[]",  "[::1",
	    "[:g]", "a/b",    "a\nb",     "a\\b", ":80", "a:80:1",
	    "a%2e", "[::1]x", "a?b",      "a#b",  "a&b", "a|b"};
	char longhost[300];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (!cnl_api_cli_valid_host(good[i]))
			fail_msg("refused the host \"%s\"", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cnl_api_cli_valid_host(bad[i]))
			fail_msg("accepted the host \"%s\"", bad[i]);
	memset(longhost, 'a', sizeof(longhost) - 1);
	longhost[sizeof(longhost) - 1] = '\0';
	assert_false(cnl_api_cli_valid_host(longhost));
	assert_false(cnl_api_cli_valid_host(NULL));
}

static void test_public_url(void **state)
{
	static const char *const bad[] = {
	    "ftp://x",          "http://",        "http://a b",
	    "https://x/'$(id)", "http://x/a?b=1", "x.example.org",
	    "http://x/\"",      "http://x/a b",   "http://x;y"};
	struct cnl_api_cli *cli = NULL;
	char err[256], *text = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (cnl_api_cli_new("/nonexistent", bad[i], &cli, err,
		                    sizeof(err)) != -CNL_ECONFIG)
			fail_msg("accepted public_url \"%s\"", bad[i]);
		assert_non_null(strstr(err, "public_url"));
	}
	/* A good one is written as it is, less its trailing slashes, and
	 * wins over the Host header. */
	assert_int_equal(cnl_api_cli_new(NULL, "https://x.example/cn~lab_1//",
	                                 &cli, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_api_cli_script(cli, "other:1", &text), 0);
	assert_non_null(
	    strstr(text, "\nCNLAB_URL='https://x.example/cn~lab_1'\n"));
	assert_null(strstr(text, "other:1"));
	free(text);
	/* ... and no Host header is needed then. */
	assert_int_equal(cnl_api_cli_script(cli, NULL, &text), 0);
	free(text);
	cnl_api_cli_free(cli);
}

static void put(const char *dir, const char *name, const char *content)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)),
	                 (ssize_t)strlen(content));
	close(fd);
}

static void test_catalog(void **state)
{
	struct cnl_api_cli *cli = NULL;
	char dir[] = "/tmp/cnl-cli-XXXXXX", path[256], link[256];
	char err[256], *text;

	assert_non_null(mkdtemp(dir));
	put(dir, "cnlab-linux-x86_64", "abc");
	put(dir, "cnlab-darwin-aarch64", "");
	put(dir, "cnlab-linux-x86_64.bak", "old");
	put(dir, "README", "not a binary");
	put(dir, "target", "elsewhere");
	/* A link and a folder with good names are not plain files. */
	snprintf(path, sizeof(path), "%s/target", dir);
	snprintf(link, sizeof(link), "%s/cnlab-linux-link", dir);
	assert_int_equal(symlink(path, link), 0);
	snprintf(path, sizeof(path), "%s/cnlab-linux-dir", dir);
	assert_int_equal(mkdir(path, 0755), 0);

	assert_int_equal(cnl_api_cli_new(dir, NULL, &cli, err, sizeof(err)), 0);
	assert_int_equal(cnl_api_cli_count(cli), 2);
	text = cnl_api_cli_sums(cli);
	assert_string_equal(text, SHA_EMPTY "  cnlab-darwin-aarch64\n" SHA_ABC
	                                    "  cnlab-linux-x86_64\n");
	free(text);

	/* The script names the platforms and the URL from Host, with the
	 * scheme the server speaks. */
	assert_int_equal(cnl_api_cli_script(cli, "h.example:8080", &text), 0);
	assert_true(strncmp(text, "#!/bin/sh\n", 10) == 0);
	assert_non_null(strstr(text, "\nCNLAB_URL='http://h.example:8080'\n"));
	assert_non_null(
	    strstr(text, "\nCNLAB_PLATFORMS='darwin-aarch64 linux-x86_64'\n"));
	assert_non_null(strstr(text, "\nmain \"$@\"\n"));
	free(text);
	cnl_api_cli_set_tls(cli, true);
	assert_int_equal(cnl_api_cli_script(cli, "[::1]:8443", &text), 0);
	assert_non_null(strstr(text, "\nCNLAB_URL='https://[::1]:8443'\n"));
	free(text);
	text = NULL;
	assert_int_equal(cnl_api_cli_script(cli, "x'$(id)'", &text),
	                 -CNL_EFIELD);
	assert_int_equal(cnl_api_cli_script(cli, NULL, &text), -CNL_EFIELD);
	assert_null(text);
	cnl_api_cli_free(cli);

	/* A cli_dir that cannot be read stops the server, naming it. */
	snprintf(path, sizeof(path), "%s/missing", dir);
	assert_int_equal(cnl_api_cli_new(path, NULL, &cli, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_non_null(strstr(err, "cli_dir"));
	assert_non_null(strstr(err, path));

	/* An empty one is no error: the installer says none is there. */
	snprintf(path, sizeof(path), "%s/cnlab-linux-dir", dir);
	assert_int_equal(cnl_api_cli_new(path, NULL, &cli, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_api_cli_count(cli), 0);
	text = cnl_api_cli_sums(cli);
	assert_string_equal(text, "");
	free(text);
	assert_int_equal(cnl_api_cli_script(cli, "h", &text), 0);
	assert_non_null(strstr(text, "\nCNLAB_PLATFORMS=''\n"));
	free(text);
	cnl_api_cli_free(cli);

	static const char *const names[] = {"cnlab-linux-x86_64",
	                                    "cnlab-darwin-aarch64",
	                                    "cnlab-linux-x86_64.bak",
	                                    "README",
	                                    "target",
	                                    "cnlab-linux-link"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/cnlab-linux-dir", dir);
	rmdir(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_hosts),
	    cmocka_unit_test(test_public_url),
	    cmocka_unit_test(test_catalog),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
